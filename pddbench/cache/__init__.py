from pddbench.cache.prefix_cache import PrefixCache

__all__ = ["PrefixCache"]
