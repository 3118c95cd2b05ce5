"""Measurement: real training steps timed and their memory read, with the host probe beside them."""
