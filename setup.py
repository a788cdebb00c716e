"""The one compiled module: the prefix cache (pddbench/cache/_prefix_cache.pyx). Optional: where it
cannot be built (no C++ compiler), the pure-Python PrefixCache is used, with the same results."""

from Cython.Build import cythonize
from setuptools import Extension, setup

setup(ext_modules=cythonize(
    [Extension("pddbench.cache._prefix_cache", ["pddbench/cache/_prefix_cache.pyx"], language="c++",
               extra_compile_args=["-O2"], optional=True)],
    language_level=3, quiet=True))
