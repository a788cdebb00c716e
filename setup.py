"""Compiled speed-ups, all optional (where no C/C++ compiler is there the package is pure Python,
with the same results): the prefix cache (pddbench/cache/_prefix_cache.pyx, C++ containers) and
the simulator's hot modules compiled from their Python source as they are (pddbench/_compiled.py
lists them and keeps an edited source from being shadowed by a stale build)."""

import runpy

from Cython.Build import cythonize
from setuptools import Extension, setup

FLAGS = ["-O2", "-ffp-contract=off"]  # no fused multiply-add: floats as Python computes them
modules = runpy.run_path("pddbench/_compiled.py")["COMPILED"]
extensions = [Extension("pddbench.cache._prefix_cache", ["pddbench/cache/_prefix_cache.pyx"],
                        language="c++", extra_compile_args=FLAGS, optional=True)]
extensions += [Extension(m, [m.replace(".", "/") + ".py"], extra_compile_args=FLAGS, optional=True)
               for m in modules]
setup(ext_modules=cythonize(extensions, language_level=3, quiet=True, nthreads=2),
      options={"build_ext": {"parallel": 2}})
