"""The house's shape: the schema and the ground layers import no runtime, the two runtimes do not
import each other, netem stands alone, and no modules import each other in a circle. Read from the
code's own imports (top-level and inside functions alike), so a new shortcut fails here."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("pddbench", "netem")
GROUND = ("pddbench._compiled", "pddbench.errors", "pddbench.io", "pddbench.loading", "pddbench.provenance", "pddbench.shipped", "pddbench.scenario", "pddbench.runtime_config",
          "pddbench.workload", "pddbench.cache", "pddbench.policy", "pddbench.records", "pddbench.metrics")
RUNTIMES = ("pddbench.sim", "pddbench.live")


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in (REPO / pkg).rglob("*.py"):
            rel = path.relative_to(REPO).with_suffix("")
            if any(p in ("scenarios", "traces", "engine_site") for p in rel.parts):
                continue
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            out[".".join(parts)] = path
    return out


def import_graph() -> dict[str, set[str]]:
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(pkg.split(".")[: len(pkg.split(".")) - node.level + 1] + ([base] if base else []))
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            for name in names:
                while name and name not in mods:
                    name = name.rpartition(".")[0]
                if name and name != mod:
                    graph[mod].add(name)
    return graph


def _under(mod: str, prefixes: tuple[str, ...]) -> bool:
    return any(mod == p or mod.startswith(p + ".") for p in prefixes)


def test_no_import_cycle():
    graph = import_graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(n):] + [n]))
            if n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


def test_floors():
    graph = import_graph()
    bad = []
    for mod, deps in graph.items():
        for dep in deps:
            if _under(mod, ("netem",)) and dep.startswith("pddbench"):
                bad.append((mod, dep))  # netem stands alone
            if _under(mod, GROUND) and dep != "pddbench" and (_under(dep, RUNTIMES) or not _under(dep, GROUND + ("netem",))):
                bad.append((mod, dep))  # the ground imports only the ground
            if _under(mod, ("pddbench.sim",)) and _under(dep, ("pddbench.live",)):
                bad.append((mod, dep))
            if _under(mod, ("pddbench.live",)) and _under(dep, ("pddbench.sim",)):
                bad.append((mod, dep))
    assert not bad, f"imports across floors: {sorted(bad)}"


def test_the_schema_loads_no_runtime():
    """Validating a scenario, live parts included, loads neither the simulator nor live code nor torch."""
    code = ("import sys; from pddbench.scenario import load_scenario; "
            "load_scenario('scenarios/live/pdd.yaml'); load_scenario('scenarios/paper/pdd.yaml'); "
            "print(' '.join(m for m in sys.modules if m.startswith(('pddbench.sim', 'pddbench.live', 'torch', 'vllm'))))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "", f"the schema loaded runtime modules: {res.stdout}"


def test_graph_reader_sees_a_real_edge():
    """Guards the tests above against a reader that finds no imports at all."""
    graph = import_graph()
    assert "pddbench.scenario" in graph["pddbench.sim.run"]
    assert "pddbench.runtime_config" in graph["pddbench.scenario"]


def test_simulating_needs_neither_torch_nor_vllm():
    """`pip install .` without the `live` extra must simulate: nothing on that path imports them."""
    code = ("import sys; from pddbench.scenario import load_scenario; from pddbench.runner import simulate_summary; "
            "import pddbench.cli; "
            "simulate_summary(load_scenario('paper/pdd', ['workload.synth.requests=50'])); "
            "print(' '.join(m for m in ('torch', 'vllm') if m in sys.modules))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == ""
