"""Terminal rendering of runs (live table, plain lines, the end-of-run summary)."""
