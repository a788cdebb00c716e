"""pddbench: trace-driven benchmark and simulator for cross-datacenter PDD serving."""

from pddbench._compiled import use_sources_edited_since_the_build

__version__ = "0.1.0"

use_sources_edited_since_the_build()
