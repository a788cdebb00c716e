"""The simulator's hot modules, which setup.py compiles with Cython where a C compiler is there
(the same Python source, compiled as it is: same results, about a quarter less time per event).
A compiled module shadows its source; in a checkout a source edited after the build would then
silently not run, so such a module is imported from its source, with a warning to rebuild.
Standard library only: setup.py reads COMPILED before anything is installed."""

from __future__ import annotations

import importlib.util
import sys
import warnings
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

COMPILED = (
    "pddbench.sim.cluster", "pddbench.sim.decode", "pddbench.sim.deployments", "pddbench.sim.engine",
    "pddbench.sim.latency", "pddbench.sim.link", "pddbench.sim.prefill", "pddbench.sim.request",
    "pddbench.sim.run", "pddbench.policy.pdd", "pddbench.workload.synth",
)
PROJECT = Path(__file__).resolve().parent.parent


def source_of(module: str) -> Path:
    return PROJECT / (module.replace(".", "/") + ".py")


def compiled_modules() -> list[str]:
    """The modules of COMPILED that run compiled (a built extension beside the source)."""
    return [m for m in COMPILED if _extension_of(source_of(m)) is not None]


def _extension_of(src: Path) -> Path | None:
    for suffix in EXTENSION_SUFFIXES:
        ext = src.with_name(src.stem + suffix)
        if ext.exists():
            return ext
    return None


class _FromSource:
    """A finder that imports the named modules from their .py files."""

    def __init__(self, sources: dict[str, Path]):
        self.sources = sources

    def find_spec(self, name, path=None, target=None):
        src = self.sources.get(name)
        return importlib.util.spec_from_file_location(name, src) if src else None


def use_sources_edited_since_the_build() -> None:
    if not (PROJECT / "setup.py").exists():
        return  # an installed copy: its sources do not change after the build
    stale = {}
    for m in COMPILED:
        src = source_of(m)
        ext = _extension_of(src)
        if ext is not None and src.stat().st_mtime > ext.stat().st_mtime:
            stale[m] = src
    if stale:
        names = ", ".join(str(p.relative_to(PROJECT)) for p in stale.values())
        warnings.warn(f"{names} changed since it was compiled: running the source (slower); "
                      "`make setup` recompiles", RuntimeWarning, stacklevel=2)
        sys.meta_path.insert(0, _FromSource(stale))
