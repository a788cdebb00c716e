"""Ground utilities: errors, atomic output, strict loading, provenance, shipped data."""
