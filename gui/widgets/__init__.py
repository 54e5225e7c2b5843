"""Qt widgets of the Rankwatch window."""
