"""Runner-side telemetry helpers (the worker side lives in runner/worker_path/rankwatch)."""
