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
GROUND = ("pddbench._compiled", "pddbench.core.errors", "pddbench.core.io", "pddbench.core.loading", "pddbench.core.provenance", "pddbench.core.shipped", "pddbench.schema.scenario", "pddbench.schema.runtime_config", "pddbench.schema.ranges",
          "pddbench.workload", "pddbench.cache", "pddbench.policy", "pddbench.metrics.records", "pddbench.metrics",
          "pddbench.models")
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
    code = ("import sys; from pddbench.schema.scenario import load_scenario; "
            "load_scenario('scenarios/live/pdd.yaml'); load_scenario('scenarios/paper/pdd.yaml'); "
            "print(' '.join(m for m in sys.modules if m.startswith(('pddbench.sim', 'pddbench.live', 'torch', 'vllm'))))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "", f"the schema loaded runtime modules: {res.stdout}"


def test_graph_reader_sees_a_real_edge():
    """Guards the tests above against a reader that finds no imports at all."""
    graph = import_graph()
    assert "pddbench.schema.scenario" in graph["pddbench.sim.run"]
    assert "pddbench.schema.runtime_config" in graph["pddbench.schema.scenario"]


def test_simulating_needs_neither_torch_nor_vllm():
    """`pip install .` without the `live` extra must simulate: nothing on that path imports them."""
    code = ("import sys; from pddbench.schema.scenario import load_scenario; from pddbench.measure.runner import simulate_summary; "
            "import pddbench.cli; "
            "simulate_summary(load_scenario('paper/pdd', ['workload.synth.requests=50'])); "
            "print(' '.join(m for m in ('torch', 'vllm') if m in sys.modules))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == ""


def _room(mod: str) -> str:
    """A module's room in the house: its package under pddbench (pddbench.sim, pddbench.gate), or
    the module itself when it sits directly in pddbench/ or is netem."""
    parts = mod.split(".")
    if parts[0] == "netem":
        return "netem"
    if len(parts) >= 2 and (REPO / "pddbench" / parts[1]).is_dir():
        return ".".join(parts[:2])
    return mod


def room_graph() -> dict[str, set[str]]:
    rooms: dict[str, set[str]] = {}
    for mod, deps in import_graph().items():
        r = _room(mod)
        rooms.setdefault(r, set())
        rooms[r] |= {_room(d) for d in deps if _room(d) != r and d != "pddbench"}
    return rooms


MAX_FLOORS = 12
MAX_TOP_LEVEL_MODULES = 8


def test_rooms_have_no_circle_and_few_floors():
    """Packages by job: no two rooms import each other (even through others), and the longest
    chain of imports between rooms is at most MAX_FLOORS."""
    graph = room_graph()
    floors: dict[str, int] = {}

    def floor(r: str, path: tuple[str, ...] = ()) -> int:
        if r in path:
            raise AssertionError("rooms import each other: " + " -> ".join(path[path.index(r):] + (r,)))
        if r not in floors:
            floors[r] = 1 + max((floor(d, path + (r,)) for d in graph[r]), default=0)
        return floors[r]

    top = max(floor(r) for r in graph)
    assert top <= MAX_FLOORS, f"{top} floors: " + ", ".join(f"{r}={f}" for r, f in sorted(floors.items(), key=lambda x: -x[1]))


def test_few_modules_directly_in_the_package():
    loose = sorted(p.name for p in (REPO / "pddbench").glob("*.py"))
    assert len(loose) <= MAX_TOP_LEVEL_MODULES, loose


def test_no_private_import_across_packages():
    """`from pddbench.x import _name` or `import pddbench.x._mod` from another room is a shortcut."""
    mods = _modules()
    bad = []
    for mod, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pddbench") and not node.level:
                if _room(node.module) == _room(mod):
                    continue
                bad += [(mod, f"{node.module}.{a.name}") for a in node.names if a.name.startswith("_")]
                if any(part.startswith("_") and part != "_compiled" for part in node.module.split(".")):
                    bad.append((mod, node.module))
    assert not bad, f"private imports across packages: {sorted(bad)}"
