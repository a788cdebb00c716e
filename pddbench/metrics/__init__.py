"""Metrics: one definition per metric, shared by the simulator and live runs (docs/metrics.md)."""
