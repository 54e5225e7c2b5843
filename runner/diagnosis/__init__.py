"""Diagnosis: which rank failed first and why, hangs, stragglers, the environment."""
