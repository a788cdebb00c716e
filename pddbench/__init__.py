"""pddbench: trace-driven benchmark and simulator for cross-datacenter PDD serving."""

__version__ = "0.1.0"
