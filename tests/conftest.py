from __future__ import annotations

import os
import secrets
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
# `machine_wide`. `make test` (tests/run_suite.sh) runs them one after another in one pytest while
# a second pytest runs every other test beside them, so a check for leftovers never sees another
# test's live processes and the CPU is not idle while engines wait on the emulated WAN. Whole
# modules, or module::test (every parametrization of it) where the rest of a module is ordinary.
MACHINE_WIDE = {"test_engine_start", "test_live_attach", "test_live_pdd",
                "test_live_ray", "test_live_ray_wan", "test_live_sim_records", "test_live_vllm", "test_netem_host_mode",
                "test_netem_live", "test_sharded_replay",
                "test_battery::test_issue40_engine_teardown_holds_ctrl_c",  # a process marked as an engine's
                "test_battery::test_issue40_netem_refusal_touches_nothing_it_did_not_make",  # a delay line's
                "test_handoff_bench::test_over_the_emulated_wan_each_handoff_pays_the_delay",
                "test_netem_unit::test_up_interrupted_midway_leaves_nothing",
                "test_sweep::test_ray_head_gives_the_same_bytes",
                # the only ones of their modules that start engines (the rest: refusals and configs)
                "test_gpu_calibration::test_the_pipeline_runs_on_cpu_vllm_with_dummy_weights",
                "test_live_declared::test_a_declared_layout_other_than_the_fixed_one_runs_on_real_engines"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        module = item.module.__name__.rsplit(".", 1)[-1]
        if module in MACHINE_WIDE or f"{module}::{item.originalname}" in MACHINE_WIDE:
            item.add_marker(pytest.mark.machine_wide)


def ray_test_env() -> dict[str, str]:
    """The environment of a test's Ray cluster. Token auth on every node alike, with the cluster's
    own token: once ~/.ray/auth_token exists (any earlier `ray start` made it) a head enables it
    and a worker without RAY_AUTH_MODE=token cannot join, and on a fresh machine (no such file)
    `ray start` in token mode refuses to start."""
    return {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | {
        "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}


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
