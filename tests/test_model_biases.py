"""Modelling biases of issue 14, each pinned by a test that would have caught it."""

import pytest

from pddbench.policy import pdd as policy
from pddbench.scenario import load_scenario
from pddbench.sim.run import simulate
from pddbench.workload.trace import Request
from tests.conftest import REPO

PAPER = REPO / "scenarios" / "paper"


def _scenario(name, *overrides):
    return load_scenario(PAPER / f"{name}.yaml", list(overrides))


# -- 1. the decode-side prefix cache (DRC) holds a prompt from admission on ----------------------

@pytest.mark.parametrize("name", ["cross-dc-pd", "pdd"])
def test_concurrent_request_sharing_a_prefix_ships_only_its_miss(name):
    """Two requests share 8 blocks; the second arrives while the first is still decoding on the
    only decode instance. The first's prompt KV is there, so the second ships only its one new
    block over the WAN. (With insertion at finish, it shipped all 9 blocks.)"""
    pool = "main" if name == "pdd" else "decode"
    sc = _scenario(name, f"deployment.{pool}.instances=1")
    shared = list(range(100, 108))
    reqs = [Request(0, 8 * 512, 2000, shared, 0, 0),
            Request(3000, 9 * 512, 50, [*shared, 999], 1, 0)]
    rec, _ = simulate(sc, reqs)
    second = rec.iloc[1]
    assert not second["failed"]
    assert second["decode_cached_tokens"] == 8 * 512
    assert second["wan_kv_bytes"] == policy.kv_transfer_bytes(512, sc.model.kv_bytes_per_token,
                                                               sc.deployment.kv_block_tokens)
    # the first request was still running when the second was routed
    assert rec.iloc[0]["finish_ms"] > second["prefill_end_ms"]
