"""The simulator's hot modules, which setup.py compiles with Cython where a C compiler is there:
the same Python source compiled as it is, typed by the .pxd beside it (same results, about half
the time of a run: sim-speed paired with the pure build). A compiled module shadows its source,
so two cases import the source:
- PDDBENCH_PURE_PYTHON=1: everything runs as Python (profilers see every function; the tests
  compare the two builds' records);
- in a checkout, a source edited after the build (it would silently not run): with a warning
  to rebuild.
The one list of what is compiled: setup.py builds COMPILED and PREFIX_CACHE from here, and the
Makefile's rebuild rule depends on `python pddbench/_compiled.py --sources`. Standard library only:
setup.py and the Makefile read this file before anything is installed."""

from __future__ import annotations

import importlib.util
import os
import sys
import warnings
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

COMPILED = (
    "pddbench.sim.cluster", "pddbench.sim.decode", "pddbench.sim.deployments", "pddbench.sim.engine",
    "pddbench.sim.latency", "pddbench.sim.link", "pddbench.sim.prefill", "pddbench.sim.request",
    "pddbench.sim.run", "pddbench.policy.pdd", "pddbench.workload.synth",
)
# C++ (its own .pyx, not a compiled copy of a .py): pddbench.cache imports it, or the pure
# prefix_cache.py it mirrors
PREFIX_CACHE = "pddbench.cache._prefix_cache"
PURE_PYTHON_ENV = "PDDBENCH_PURE_PYTHON"
PROJECT = Path(__file__).resolve().parent.parent


def pure_python() -> bool:
    return os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0")


def source_of(module: str) -> Path:
    return PROJECT / (module.replace(".", "/") + (".pyx" if module == PREFIX_CACHE else ".py"))


def sources() -> list[Path]:
    """Every file the compiled build reads: each module's source and the .pxd beside it."""
    out = []
    for module in (*COMPILED, PREFIX_CACHE):
        src = source_of(module)
        out += [src] + [pxd for pxd in [src.with_suffix(".pxd")] if pxd.exists()]
    return out


def extension_of(src: Path) -> Path | None:
    """The built extension of a .py or .pyx source, if there is one beside it."""
    for suffix in EXTENSION_SUFFIXES:
        ext = src.with_name(src.stem + suffix)
        if ext.exists():
            return ext
    return None


def edited_since_built(src: Path, ext: Path) -> bool:
    return src.stat().st_mtime > ext.stat().st_mtime


def compiled_usable(src: Path) -> bool:
    """Whether the extension built from `src` may be imported: it exists, pure Python is not asked
    for, and (in a checkout: an installed copy's sources do not change) `src` is not newer."""
    ext = extension_of(src)
    if ext is None or pure_python():
        return False
    if (PROJECT / "setup.py").exists() and edited_since_built(src, ext):
        _warn_stale([src])
        return False
    return True


def simulator_build() -> str:
    """How much of the simulator runs compiled in this process (its speed depends on it), e.g.
    "compiled 12/12 modules"; the prefix cache counts as one."""
    n = sum(compiled_usable(source_of(m)) for m in (*COMPILED, PREFIX_CACHE))
    return f"compiled {n}/{len(COMPILED) + 1} modules"


def _warn_stale(sources: list[Path]) -> None:
    names = ", ".join(str(p.relative_to(PROJECT)) for p in sources)
    warnings.warn(f"{names} changed since it was compiled: running the source (slower); `make setup` "
                  "recompiles", RuntimeWarning, stacklevel=3)


class _FromSource:
    """A finder that imports the named modules from their .py files."""

    def __init__(self, sources: dict[str, Path]):
        self.sources = sources

    def find_spec(self, name, path=None, target=None):
        src = self.sources.get(name)
        return importlib.util.spec_from_file_location(name, src) if src else None


def route_imports() -> None:
    """Import from source each module of COMPILED whose extension may not be used."""
    sources = {m: source_of(m) for m in COMPILED
               if extension_of(source_of(m)) is not None and not compiled_usable(source_of(m))}
    if sources:
        sys.meta_path.insert(0, _FromSource(sources))


if __name__ == "__main__":  # the Makefile: `python pddbench/_compiled.py --sources`, one path a line
    if sys.argv[1:] != ["--sources"]:
        sys.exit("usage: python pddbench/_compiled.py --sources  (the compiled build's source files)")
    print("\n".join(str(p.relative_to(PROJECT)) for p in sources()))
