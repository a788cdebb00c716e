"""Deterministic discrete-event simulator: the embedded default runtime."""
