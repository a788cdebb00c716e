"""The PDD router's logic without engines (on real vLLM: tests/test_live_pdd.py)."""

import pytest

from netem.profile import LinkProfile
from pddbench.live.pdd_router import Router, RouterConfig
from pddbench.sim.engine import EventLoop
from pddbench.sim.link import Link


@pytest.mark.parametrize("sharing", ["fair", "fifo"])
def test_wan_prediction_matches_the_simulators_link(sharing):
    """After the same pulls start, the router predicts what the simulator's link predicts (1e3 B/ms:
    the microseconds this test takes cannot move it)."""
    cfg = RouterConfig(prefill="", relay="", main="", kv_bytes_per_token=2048, block_size=128, wan_rate_gbps=0.008,
                       wan_delay_ms=25.0, wan_sharing=sharing, ttft_sla_ms=5000.0)
    router = Router(cfg)
    link = Link(EventLoop(), LinkProfile(delay_ms=25, rate_gbps=0.008, sharing=sharing), "wan")
    for nbytes in (1e6, 2e6):
        router._book_wan(int(nbytes))
        link.send(nbytes, lambda: None)
    assert router.predict_wan_ms(500_000) == pytest.approx(link.predict_ms(500_000), abs=5)
    expected = {"fair": 500 * 3 + 25, "fifo": 1000 + 2000 + 500 + 25}[sharing]
    assert link.predict_ms(500_000) == pytest.approx(expected)
