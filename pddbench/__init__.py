"""pddbench: trace-driven benchmark and simulator for cross-datacenter PDD serving."""

from pddbench._compiled import route_imports

__version__ = "0.1.0"

route_imports()  # compiled modules, or their sources where those must run (pddbench/_compiled.py)
