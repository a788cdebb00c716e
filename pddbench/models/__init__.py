"""Model architectures: derived sizes (architecture.py) and the shipped models (shipped.py)."""
