"""Rankwatch GUI."""
