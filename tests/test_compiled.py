"""The compiled build (pddbench/_compiled.py, setup.py) against the pure-Python one: the same
records byte for byte; an edited source is never shadowed by a stale build; where a compiler is
there every listed module is built and loaded; setup.py and the Makefile take the list from
_compiled.py; and each .pxd declares what its source has."""

import ast
import hashlib
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

from pddbench._compiled import PURE_PYTHON_ENV, _FromSource, edited_since_built
from pddbench.cache import COMPILED as CACHE_COMPILED
from tests.conftest import REPO

RECORDS_DIGEST = """
import hashlib, io, json, sys
from pddbench._compiled import COMPILED
from pddbench.schema.scenario import load_scenario
from pddbench.sim.run import simulate
for name, overrides in json.loads(sys.argv[1]):
    records, facts = simulate(load_scenario(name, overrides))
    buf = io.StringIO()
    records.to_csv(buf, index=False)
    print(name, hashlib.sha256(buf.getvalue().encode()).hexdigest(), facts["sim_events"],
          json.dumps(facts["sim_events_by_kind"]))
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


# -- one list of compiled modules, and every one of them built --------------------------------------

BUILT_EXTENSIONS = """
import importlib, json, sys
from pddbench._compiled import COMPILED, PREFIX_CACHE
out = {}
for m in (*COMPILED, PREFIX_CACHE):
    importlib.import_module(m)
    out[m] = sys.modules[m].__file__
print(json.dumps(out))
"""


def test_every_listed_module_is_built_and_loaded_where_a_compiler_is_there():
    """setup.py builds with optional=True (no compiler: the package runs its sources), so a module
    that fails to compile would run as Python unnoticed. Cython itself is a build requirement
    (pyproject.toml, installed by pip into the isolated build, not this environment): where a C
    compiler is there, the install compiled every module or it is a bug."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc): the install runs the sources, as setup.py allows")
    from pddbench._compiled import COMPILED, PREFIX_CACHE, extension_of, source_of

    listed = [*COMPILED] + ([PREFIX_CACHE] if shutil.which("c++") else [])
    not_built = [str(source_of(m).relative_to(REPO)) for m in listed if extension_of(source_of(m)) is None]
    assert not not_built, f"not compiled (setup.py let the failure pass): {not_built}; see `make setup`'s output"
    env = {k: v for k, v in os.environ.items() if k != PURE_PYTHON_ENV}
    res = subprocess.run([sys.executable, "-c", BUILT_EXTENSIONS], capture_output=True, text=True, cwd=REPO,
                         env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    files = json.loads(res.stdout)
    ran_source = sorted(m for m in listed if not files[m].endswith(tuple(EXTENSION_SUFFIXES)))
    assert not ran_source, (f"built but its source was imported (edited since the build? `make setup` "
                            f"rebuilds): {ran_source}; {res.stderr.strip()}")


def test_the_makefile_and_setup_take_the_compiled_list_from_one_place():
    from pddbench._compiled import COMPILED, PREFIX_CACHE, sources

    res = subprocess.run([sys.executable, "pddbench/_compiled.py", "--sources"], capture_output=True, text=True,
                         cwd=REPO, timeout=60)
    assert res.returncode == 0, res.stderr
    printed = res.stdout.split()
    assert printed == [str(p.relative_to(REPO)) for p in sources()]
    for m in (*COMPILED, PREFIX_CACHE):
        src = m.replace(".", "/") + (".pyx" if m == PREFIX_CACHE else ".py")
        assert src in printed
        if (REPO / src).with_suffix(".pxd").exists():
            assert str(Path(src).with_suffix(".pxd")) in printed
    assert all((REPO / p).is_file() for p in printed)
    makefile = (REPO / "Makefile").read_text()
    assert "$(shell $(PYTHON) pddbench/_compiled.py --sources)" in makefile
    setup = (REPO / "setup.py").read_text()
    assert 'runpy.run_path("pddbench/_compiled.py")' in setup and '"pddbench.sim' not in setup
    if shutil.which("make"):  # what make itself expands the rebuild rule's sources to
        res = subprocess.run(["make", "-s", "--no-print-directory", "-f", "Makefile", "-f", "-", "show-compiled-src"],
                             input="show-compiled-src:\n\t@echo $(COMPILED_SRC)\n", capture_output=True, text=True,
                             cwd=REPO, timeout=60)
        assert res.returncode == 0, res.stderr
        assert set(printed) | {"setup.py", "pddbench/_compiled.py"} == set(res.stdout.split())


# -- the .pxd beside a compiled source declares what the source has ---------------------------------

_PXD_DECL = re.compile(r"^(cpdef|cdef|def)\s+(?:(public|readonly)\s+)?(.*)$")


def pxd_declarations(text: str) -> dict[str, tuple[set[str], set[str]]]:
    """{class name: (attributes, methods)} of a .pxd's cdef classes; "" is the module (its cdef
    variables and functions). A small parser for the declarations the project writes: decorators
    (also over several lines), cimports and comments are skipped; a declaration is one line."""
    out: dict[str, tuple[set[str], set[str]]] = {"": (set(), set())}
    cls, depth = "", 0
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].rstrip()
        if depth:  # inside a decorator's parentheses
            depth += line.count("(") - line.count(")")
            continue
        if not line.strip():
            continue
        indented = line[0].isspace()
        line = line.strip()
        if not indented:
            cls = ""
        if line.startswith("@"):
            depth = line.count("(") - line.count(")")
            continue
        if m := re.match(r"cdef\s+class\s+(\w+)", line):
            cls = m.group(1)
            out[cls] = (set(), set())
            continue
        m = _PXD_DECL.match(line)
        if m is None or re.match(r"c(?:def|typedef)\s+(?:enum|struct|union|extern)\b", line):
            continue
        attrs, methods = out[cls]
        if "(" in m.group(3):  # a function: cpdef double _uptime(self, ...)
            methods.add(re.match(r"[^(]*?(\w+)\s*\(", m.group(3)).group(1))
        else:  # cdef public double a, b  /  cdef Py_ssize_t counts[13]  /  cdef unsigned long x
            first, *more = m.group(3).split(",")
            names = [first.split()[-1], *more]
            attrs.update(re.sub(r"[*\s]|\[.*\]", "", n) for n in names)
    return out


def py_definitions(text: str) -> dict[str, tuple[set[str], set[str]]]:
    """{class name: (attributes, methods)} of a module: a class's __slots__ and every self.X it
    assigns, its methods; "" is the module (its assigned names and functions)."""
    tree = ast.parse(text)
    out = {"": ({t.id for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                 for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)},
                {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))})}
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        attrs: set[str] = set()
        for n in cls.body:
            if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__slots__" for t in n.targets):
                attrs |= set(ast.literal_eval(n.value))
        for n in ast.walk(cls):
            if (isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store) and isinstance(n.value, ast.Name)
                    and n.value.id == "self"):
                attrs.add(n.attr)
        out[cls.name] = (attrs, {n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))})
    return out


def pxd_drift(pxd_text: str, py_text: str, where: str) -> list[str]:
    """What a .pxd and its .py disagree on: a class or method the .pxd declares that the .py lacks,
    and attributes on either side only (a cdef class has no __dict__: an attribute the .pxd does not
    declare fails when set, in the compiled build only). The .py may have methods the .pxd does
    not declare (plain def methods)."""
    pxd, py = pxd_declarations(pxd_text), py_definitions(py_text)
    drift = []
    for cls, (attrs, methods) in pxd.items():
        name = cls or "(module)"
        if cls not in py:
            drift.append(f"{where}: class {cls} is declared in the .pxd, not defined in the .py")
            continue
        py_attrs, py_methods = py[cls]
        drift += [f"{where}: {name}.{a} is declared in the .pxd, not assigned in the .py" for a in sorted(attrs - py_attrs)]
        drift += [f"{where}: {name}.{f} is declared in the .pxd, not defined in the .py" for f in sorted(methods - py_methods)]
        if cls:
            drift += [f"{where}: {name}.{a} is assigned in the .py, not declared in the .pxd"
                      for a in sorted(py_attrs - attrs)]
    return drift


def test_each_pxd_declares_what_its_source_has():
    from pddbench._compiled import sources

    pxds = [p for p in sources() if p.suffix == ".pxd"]
    assert len(pxds) >= 7
    drift = []
    for pxd in pxds:
        drift += pxd_drift(pxd.read_text(), pxd.with_suffix(".py").read_text(), str(pxd.relative_to(REPO)))
    assert not drift, "\n".join(drift)


def test_the_pxd_check_names_each_disagreement():
    pxd = """
cimport cython
from pddbench.sim.engine cimport EventLoop

@cython.final
cdef class Job:
    cdef public object req, on_done
    cdef public double start_ms
    cdef Py_ssize_t counts[4]

    @cython.locals(x=double,
                   y=Py_ssize_t)
    cpdef double step(self, double t)
    cpdef gone(self)

cdef class Missing:
    cdef public object a

cpdef helper(Job job)
cpdef vanished()
"""
    py = """
class Job:
    __slots__ = ("req", "on_done", "start_ms", "counts", "extra")

    def __init__(self):
        self.req = self.on_done = None
        self.start_ms, self.counts = 0.0, [0] * 4
        self.late = 1

    def step(self, t):
        return t

    def not_declared(self):  # a def method: the .pxd need not declare it
        pass


def helper(job):
    pass
"""
    assert pxd_declarations(pxd)["Job"] == ({"req", "on_done", "start_ms", "counts"}, {"step", "gone"})
    assert sorted(pxd_drift(pxd, py, "x.pxd")) == sorted([
        "x.pxd: Job.gone is declared in the .pxd, not defined in the .py",
        "x.pxd: Job.extra is assigned in the .py, not declared in the .pxd",
        "x.pxd: Job.late is assigned in the .py, not declared in the .pxd",
        "x.pxd: class Missing is declared in the .pxd, not defined in the .py",
        "x.pxd: (module).vanished is declared in the .pxd, not defined in the .py",
    ])
