"""The hub: telemetry in, store writes, batched updates out."""
