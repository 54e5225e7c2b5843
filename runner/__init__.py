"""Rankwatch runner."""
