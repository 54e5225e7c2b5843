"""Launching: command building, ports, process supervision and cleanup."""
