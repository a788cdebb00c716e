"""The prefix cache: compiled (`_prefix_cache.pyx`) where the install built it, else the pure-Python
one it mirrors step for step (`prefix_cache.py`); both give the same hits and victims."""

from pddbench.cache.prefix_cache import PrefixCache as PyPrefixCache

try:
    from pddbench.cache._prefix_cache import PrefixCache
    COMPILED = True
except ImportError:  # not built (no C++ compiler at install): same results, slower
    PrefixCache = PyPrefixCache  # type: ignore[misc]
    COMPILED = False

__all__ = ["PrefixCache", "PyPrefixCache", "COMPILED"]
