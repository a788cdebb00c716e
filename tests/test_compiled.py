"""The compiled build (pddbench/_compiled.py, setup.py) against the pure-Python one: the same
records byte for byte; and an edited source is never shadowed by a stale build."""

import hashlib
import importlib
import os
import subprocess
import sys
from importlib.machinery import EXTENSION_SUFFIXES

import pytest

from pddbench._compiled import PURE_PYTHON_ENV, _FromSource, edited_since_built
from pddbench.cache import COMPILED as CACHE_COMPILED
from tests.conftest import REPO

RECORDS_DIGEST = """
import hashlib, io, json, sys
from pddbench._compiled import COMPILED
from pddbench.scenario import load_scenario
from pddbench.sim.run import simulate
for name, overrides in json.loads(sys.argv[1]):
    records, facts = simulate(load_scenario(name, overrides))
    buf = io.StringIO()
    records.to_csv(buf, index=False)
    print(name, hashlib.sha256(buf.getvalue().encode()).hexdigest(), facts["sim_events"])
print("compiled", sum(not sys.modules[m].__file__.endswith(".py") for m in COMPILED if m in sys.modules))
"""
# the handoff modes, a PD baseline, and the live twin (calibrated steps, core sharing, replayed links)
SCENARIOS = '''[["paper/pdd", ["workload.synth.requests=1500", "workload.source=synth"]],
 ["paper/pdd-catch-up", ["workload.synth.requests=800"]],
 ["paper/same-dc-pd", ["workload.synth.requests=1500", "workload.source=synth"]],
 ["live/sim-twin-pdd", []]]'''


def _digests(pure: bool) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != PURE_PYTHON_ENV}
    if pure:
        env[PURE_PYTHON_ENV] = "1"
    res = subprocess.run([sys.executable, "-c", RECORDS_DIGEST, SCENARIOS], capture_output=True, text=True,
                         cwd=REPO, env=env, timeout=600)
    assert res.returncode == 0, res.stderr
    return res.stdout.splitlines()


def test_compiled_and_pure_python_builds_give_the_same_records():
    compiled, pure = _digests(pure=False), _digests(pure=True)
    if compiled[-1] == "compiled 0" and not CACHE_COMPILED:
        pytest.skip("this install built no compiled modules (no C compiler): nothing to compare")
    assert pure[-1] == "compiled 0"  # the pure run really ran the sources
    assert compiled[-1] != "compiled 0"
    assert compiled[:-1] == pure[:-1]


def test_an_edited_source_is_imported_instead_of_its_stale_build(tmp_path, monkeypatch):
    src = tmp_path / "pddbench_fake_mod.py"
    src.write_text("WHERE = 'source'\n")
    ext = tmp_path / ("pddbench_fake_mod" + EXTENSION_SUFFIXES[0])
    ext.write_bytes(b"not a shared object")  # what a plain import would load first, and fail on
    os.utime(ext, (1_000_000, 1_000_000))
    assert edited_since_built(src, ext)
    os.utime(src, (500_000, 500_000))
    assert not edited_since_built(src, ext)

    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ImportError):
        importlib.import_module("pddbench_fake_mod")
    monkeypatch.setattr(sys, "meta_path", [_FromSource({"pddbench_fake_mod": src}), *sys.meta_path])
    monkeypatch.delitem(sys.modules, "pddbench_fake_mod", raising=False)
    assert importlib.import_module("pddbench_fake_mod").WHERE == "source"
