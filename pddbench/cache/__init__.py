"""The prefix cache: compiled (`_prefix_cache.pyx`) where the install built it, else the pure-Python
one it mirrors step for step (`prefix_cache.py`); both give the same hits and victims."""

from pathlib import Path

from pddbench._compiled import compiled_usable
from pddbench.cache.prefix_cache import PrefixCache as PyPrefixCache

COMPILED = compiled_usable(Path(__file__).with_name("_prefix_cache.pyx"))
if COMPILED:
    from pddbench.cache._prefix_cache import PrefixCache
else:  # not built (no C++ compiler at install), or pure Python asked for: same results, slower
    PrefixCache = PyPrefixCache  # type: ignore[misc]

__all__ = ["PrefixCache", "PyPrefixCache", "COMPILED"]
