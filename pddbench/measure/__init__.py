"""Commands that measure: run (and repeats), capacity, compare, fidelity, handoff-bench."""
