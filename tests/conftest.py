from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MOONCAKE = REPO / "traces" / "mooncake" / "synthetic_trace.jsonl"

# A suite started in the background (`cmd &`, nohup, some CI runners) inherits SIGINT ignored, and
# so would every pddbench it starts: the Ctrl-C tests would then send a signal nobody hears. A
# Python handler is reset to the default on exec, so this gives children a normal Ctrl-C.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


# Tests that start engines, namespaces, qdiscs, Ray heads or delay lines, or look machine-wide for
# what such tests leave (stray engines, our namespaces, a delay line's process): marked
# `machine_wide`. `make test` (tests/run_suite.sh) runs them in two lanes, each one test after
# another, while a third pytest runs every other test beside them:
# - the WAN lane (also marked `wan_lane`): whatever uses the emulated WAN's namespaces, qdiscs and
#   delay lines or Ray. Both are one per machine: the namespaces have fixed names (pddb-dc-a/b)
#   and `netem up` refuses while ours exist; `ray stop --force` stops every Ray process there is.
# - the engine lane: engines on loopback (and the tests that check what those leave).
# An engine start is a chain of three Python processes importing torch and vLLM one after the
# other, so one lane keeps one core busy: two lanes use both. A leftover check counts only the
# processes its own lane started (started_here: each lane runs under tests/lane.py, a child
# subreaper, so an orphaned engine process stays its descendant), never the other lane's engines.
MACHINE_WIDE = {"test_engine_start", "test_gpu_calibration", "test_handoff_bench", "test_live_attach",
                "test_live_client", "test_live_declared", "test_live_pdd", "test_live_ray", "test_live_ray_wan",
                "test_live_sim_records", "test_live_vllm", "test_netem_host_mode", "test_netem_live",
                "test_netem_unit", "test_sharded_replay", "test_sweep", "test_battery", "test_sizes_first",
                "test_misbehaving_server", "test_fidelity"}
# whole modules, or module::test (every parametrization of it)
WAN_LANE = {"test_live_ray", "test_live_ray_wan", "test_live_sim_records", "test_netem_live", "test_netem_host_mode",
            "test_sharded_replay",
            "test_live_vllm::test_cross_dc_pd_ttft_follows_wan_delay_and_bandwidth",
            "test_live_vllm::test_pdd_run_over_the_emulated_wan",
            "test_engine_start::test_emulated_wan_comes_up_and_down_under_an_engine_groups_sigterm_handler",
            "test_handoff_bench::test_over_the_emulated_wan_each_handoff_pays_the_delay",
            "test_netem_unit::test_up_interrupted_midway_leaves_nothing",
            "test_battery::test_issue40_netem_refusal_touches_nothing_it_did_not_make",
            "test_sweep::test_ray_head_gives_the_same_bytes"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        module = item.module.__name__.rsplit(".", 1)[-1]
        if module in MACHINE_WIDE:
            item.add_marker(pytest.mark.machine_wide)
            if module in WAN_LANE or f"{module}::{item.originalname}" in WAN_LANE:
                item.add_marker(pytest.mark.wan_lane)


def _parent(pid: int) -> int | None:
    try:  # "pid (comm) state ppid ...": comm may hold spaces, so split after its ')'
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def started_here(pids) -> list:
    """The processes among `pids` (ints, or lines that start with one, as `pgrep -a` prints) that
    this lane of the suite started, directly or not (tests/lane.py, whose pid is
    PDDBENCH_TEST_LANE_ROOT): another lane's engines are not this lane's leftovers. Outside a lane
    (pytest run alone) every one of them counts."""
    root = int(os.environ.get("PDDBENCH_TEST_LANE_ROOT") or 0)
    if not root:
        return list(pids)
    out = []
    for entry in pids:
        pid, seen = int(str(entry).split()[0]), 0
        while pid not in (None, 0, 1, root) and seen < 4096:
            pid, seen = _parent(pid), seen + 1
        if pid == root:
            out.append(entry)
    return out


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run the real `pddbench` entry point in a subprocess, as a user would."""
    return subprocess.run([sys.executable, "-m", "pddbench", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd or REPO, timeout=timeout)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> str:
    """The tiny random Llama (`pddbench model tiny`), built once per session: every engine test
    serves it read-only, and each build costs a torch import (~8 s on 2 cores)."""
    from pddbench.live.tiny_model import build_tiny_model_subprocess

    return build_tiny_model_subprocess(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session")
def mooncake_path() -> Path:
    return MOONCAKE


@pytest.fixture(scope="session")
def mooncake_requests():
    from pddbench.workload.trace import load_trace

    return load_trace(MOONCAKE)
