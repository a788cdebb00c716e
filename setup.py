"""Compiled speed-ups, all optional (where no C/C++ compiler is there the package is pure Python,
with the same results): the prefix cache (pddbench/cache/_prefix_cache.pyx, C++ containers) and
the simulator's hot modules compiled from their Python source as they are (pddbench/_compiled.py
lists them and keeps an edited source from being shadowed by a stale build)."""

import runpy

from Cython.Build import cythonize
from setuptools import Extension, setup

FLAGS = ["-O2", "-ffp-contract=off"]  # no fused multiply-add: floats as Python computes them
# optional=True: where an extension does not build, the package runs its source (same results);
# tests/test_compiled.py fails where a C compiler is there and a listed module did not build
listed = runpy.run_path("pddbench/_compiled.py")


def source(module: str) -> str:  # relative to this file, as setuptools expects
    return str(listed["source_of"](module).relative_to(listed["PROJECT"]))


extensions = [Extension(listed["PREFIX_CACHE"], [source(listed["PREFIX_CACHE"])], language="c++",
                        extra_compile_args=FLAGS, optional=True)]
extensions += [Extension(m, [source(m)], extra_compile_args=FLAGS, optional=True) for m in listed["COMPILED"]]
setup(ext_modules=cythonize(extensions, language_level=3, quiet=True, nthreads=2),
      options={"build_ext": {"parallel": 2}})
