"""The headless command-line interface."""
