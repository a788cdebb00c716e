"""Workloads: trace formats, hit-rate analysis and the agentic-session generator."""
