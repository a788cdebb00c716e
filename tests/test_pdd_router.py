"""The PDD router without engines: its config, its WAN prediction, and its request flow and
record meanings against stand-in P, RLD and MD servers on loopback (on real vLLM:
tests/test_live_pdd.py)."""

import asyncio
import json
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from pydantic import ValidationError

from netem.profile import LinkProfile
from pddbench.live.deploy import pdd_specs, router_config
from pddbench.live.net import free_port
from pddbench.live.router.app import make_app
from pddbench.live.router.config import RouterConfig
from pddbench.live.router.flow import block_hashes
from pddbench.live.router.wan import WanBook
from pddbench.live.sse import DONE, SSEParser
from pddbench.policy.pdd import kv_transfer_bytes
from pddbench.schema.scenario import Deployment, Policy, Pool, Scenario, load_scenario
from pddbench.sim.engine import EventLoop
from pddbench.sim.link import Link

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
KVB, BLOCK = 2048, 128
SLOW_WAN = LinkProfile(delay_ms=25, rate_gbps=0.008)  # any KV pull misses a 1 ms SLA budget: P->RLD->MD


def _cfg(policy: Policy | None = None, urls=("", "", ""), **over) -> RouterConfig:
    fields = dict(prefill=urls[0], relay=urls[1], main=urls[2], kv_bytes_per_token=KVB, kv_block_tokens=BLOCK,
                  relay_slots=8, wan=SLOW_WAN, ttft_sla_ms=1.0)
    return RouterConfig(policy=policy or Policy(), **{**fields, **over})


# -- WAN prediction ------------------------------------------------------------------------------

@pytest.mark.parametrize("sharing", ["fair", "fifo"])
def test_wan_prediction_matches_the_simulators_link(sharing):
    """After the same pulls start, the router predicts what the simulator's link predicts (1e3 B/ms:
    the microseconds this test takes cannot move it)."""
    profile = LinkProfile(delay_ms=25, rate_gbps=0.008, sharing=sharing)
    wan = WanBook(profile)
    link = Link(EventLoop(), profile, "wan")
    for nbytes in (1e6, 2e6):
        wan.book(int(nbytes))
        link.send(nbytes, lambda: None)
    assert wan.predict_ms(500_000) == pytest.approx(link.predict_ms(500_000), abs=5)
    expected = {"fair": 500 * 3 + 25, "fifo": 1000 + 2000 + 500 + 25}[sharing]
    assert link.predict_ms(500_000) == pytest.approx(expected)


def test_wan_booking_sees_the_emulated_rate_and_releases():
    """Live, netem shapes rate_gbps / rate_scale: the router predicts at that rate; a released
    pull no longer shares it (fair)."""
    now = [100.0]
    wan = WanBook(LinkProfile(delay_ms=10, rate_gbps=0.016, rate_scale=2), clock=lambda: now[0])
    assert wan.predict_ms(1_000_000) == pytest.approx(1000 + 10)
    wan.book(1_000_000)
    assert wan.predict_ms(1_000_000) == pytest.approx(2000 + 10)
    wan.release()
    assert wan.predict_ms(1_000_000) == pytest.approx(1000 + 10)
    fifo = WanBook(LinkProfile(delay_ms=10, rate_gbps=0.008, sharing="fifo"), clock=lambda: now[0])
    fifo.book(1_000_000)
    now[0] += 0.4  # 400 ms later, 600 ms of the first pull are still ahead
    assert fifo.predict_ms(500_000) == pytest.approx(600 + 500 + 10)


# -- config --------------------------------------------------------------------------------------

def test_router_config_carries_the_scenarios_policy_through_json():
    pol = Policy(handoff_mode="catch_up", catch_up_batch_tokens=3, relay_finish_stops_wan_kv=False,
                 singular_min_input_tokens=999)
    cfg = _cfg(pol, urls=("http://p", "http://r", "http://m"), md_cache_blocks=64,
               wan=LinkProfile(delay_ms=30, rate_gbps=1.0, sharing="fifo", rate_scale=4))
    back = RouterConfig.model_validate_json(cfg.model_dump_json())
    assert back == cfg and isinstance(back.policy, Policy) and back.policy == pol
    assert back.wan.sharing == "fifo" and back.wan.rate_scale == 4


@pytest.mark.parametrize("policy", [{"handoff_mode": "sideways"}, {"relay_busy_fraction": 1.5}, {"no_such_knob": 1}])
def test_router_config_rejects_a_policy_the_scenario_rejects(policy):
    data = _cfg().model_dump(mode="json")
    data["policy"].update(policy)
    with pytest.raises(ValidationError):
        Policy.model_validate(data["policy"])
    with pytest.raises(ValidationError) as err:
        RouterConfig.model_validate_json(json.dumps(data))
    assert err.value.errors()[0]["loc"][0] == "policy"


def test_router_config_declares_no_policy_setting_of_its_own():
    assert not set(RouterConfig.model_fields) & set(Policy.model_fields)
    data = {**_cfg().model_dump(mode="json"), "handoff_mode": "one_shot"}
    with pytest.raises(ValidationError):
        RouterConfig.model_validate_json(json.dumps(data))


def _live(deployment: dict | None) -> Scenario:
    data = {"runtime": "live", "sla": {"ttft_ms": 1234}, "network": {"wan": {"delay_ms": 7, "rate_gbps": 2}},
            "policy": {"catch_up_threshold_tokens": 5}}
    return Scenario.model_validate({**data, "deployment": deployment} if deployment else data)


def test_router_config_reads_the_relay_pool_and_kv_block_from_the_scenario():
    specs = pdd_specs("model", 9000)
    sc = _live({"kind": "pdd", "kv_block_tokens": 64,
                "relay": {"chip": "cpu", "instances": 1, "max_batch_seqs": 5}})
    cfg = router_config(sc, specs, KVB)
    assert (cfg.relay_slots, cfg.kv_block_tokens, cfg.kv_bytes_per_token) == (5, 64, KVB)
    assert cfg.policy == sc.policy and cfg.ttft_sla_ms == 1234 and cfg.wan.delay_ms == 7
    assert (cfg.prefill, cfg.relay, cfg.main) == tuple(s.url for s in specs)
    no_pool = router_config(_live({"kind": "pdd", "kv_block_tokens": 64}), specs, KVB)
    assert no_pool.relay_slots == Pool.model_fields["max_batch_seqs"].default
    bare = router_config(_live(None), specs, KVB)
    assert bare.kv_block_tokens == Deployment.model_fields["kv_block_tokens"].default
    shipped = router_config(load_scenario(SCENARIOS / "live" / "pdd.yaml"), specs, KVB)
    assert shipped.kv_block_tokens == 128, "live engines are vLLM CPU: 128-token KV blocks"
    assert shipped.relay_slots == 8


# -- request flow and record meanings, against stand-in engines ----------------------------------

def _token(position: int) -> int:
    """The stand-in model: the token at a sequence position, whichever engine computes it."""
    return 16 + position * 7 % 1000


class StandIns:
    """P, RLD and MD as small servers: P hands out KV leases, decoders stream `_token`s one per
    `token_s`; MD's one-token requests (KV pull, catch-up) take `pull_s` or fail."""

    def __init__(self, token_s: float = 0.01, pull_s: float = 0.0, md_fails: bool = False, p_fails: bool = False):
        self.token_s, self.pull_s, self.md_fails, self.p_fails = token_s, pull_s, md_fails, p_fails
        self.seen: dict[str, list[dict]] = {"P": [], "RLD": [], "MD": []}
        self.runners: list[web.AppRunner] = []

    async def _prefill(self, request):
        body = await request.json()
        self.seen["P"].append(body)
        if self.p_fails:
            return web.Response(status=500, text="P is down")
        return web.json_response({"choices": [{"text": "x", "token_ids": [_token(len(body["prompt"]))]}],
                                  "usage": {"prompt_tokens_details": {"cached_tokens": 0}},
                                  "kv_transfer_params": {"lease": len(self.seen["P"])}})

    def _decoder(self, name: str):
        async def handle(request):
            body = await request.json()
            self.seen[name].append(body)
            n_in = len(body["prompt"])
            if not body.get("stream"):
                await asyncio.sleep(self.pull_s if name == "MD" else 0)
                if name == "MD" and self.md_fails:
                    return web.Response(status=500, text="NIXL transfer failed")
                return web.json_response({"choices": [{"text": "t", "token_ids": [_token(n_in)]}]})
            out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await out.prepare(request)
            n = int(body["max_tokens"])
            try:
                for i in range(n):
                    await asyncio.sleep(self.token_s)
                    fin = "length" if i == n - 1 else None
                    await out.write(b'data: {"choices": [{"text": "t", "token_ids": [%d], "finish_reason": %s}]}\n\n'
                                    % (_token(n_in + i), b'"length"' if fin else b"null"))
                await out.write(b"data: [DONE]\n\n")
            except (ConnectionResetError, asyncio.CancelledError):
                pass  # the router cut the stream (handoff)
            return out
        return handle

    async def start(self) -> tuple[str, str, str]:
        urls = []
        for handler in (self._prefill, self._decoder("RLD"), self._decoder("MD")):
            app = web.Application()
            app.router.add_post("/v1/completions", handler)
            runner = web.AppRunner(app)
            await runner.setup()
            port = free_port()
            await web.TCPSite(runner, "127.0.0.1", port).start()
            self.runners.append(runner)
            urls.append(f"http://127.0.0.1:{port}")
        return tuple(urls)

    async def stop(self) -> None:
        for r in self.runners:
            await r.cleanup()


async def _ask(url: str, prompt: list[int], n: int) -> tuple[int, list[int], dict | None, str]:
    body = {"model": "tiny", "prompt": prompt, "max_tokens": n, "stream": True, "return_token_ids": True}
    async with aiohttp.ClientSession() as s, s.post(url + "/v1/completions", json=body) as resp:
        if resp.status != 200:
            return resp.status, [], None, await resp.text()
        ids, pdd, parser = [], None, SSEParser()
        async for chunk in resp.content.iter_any():
            for ev in parser.feed(chunk):
                if ev is DONE:
                    continue
                assert "error" not in ev, ev
                for ch in ev.get("choices") or []:
                    ids += ch.get("token_ids") or []
                pdd = ev.get("pdd", pdd)
        return 200, ids, pdd, ""


def _run(engines: StandIns, prompt: list[int], n: int, policy: Policy | None = None, prepare=None, **over):
    """One request through a fresh router in front of `engines`."""
    async def go():
        urls = await engines.start()
        app = make_app(_cfg(policy, urls=urls, **over))
        runner = web.AppRunner(app)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        if prepare:
            prepare(next(iter(app.values())))
        try:
            return await _ask(f"http://127.0.0.1:{port}", prompt, n)
        finally:
            await runner.cleanup()
            await engines.stop()
    return asyncio.run(asyncio.wait_for(go(), 30))


PROMPT = list(range(100, 400))  # 300 tokens: two full 128-token blocks and a partial one


def _reference(prompt: list[int], n: int) -> list[int]:
    return [_token(len(prompt) + i) for i in range(n)]


def test_singular_flow_never_starts_the_transfer_and_leaves_md_out():
    """Even with part of the prompt cached on MD, a singular flow is all relay: MD sees nothing,
    the record says the transfer was aborted before it started and saves all its bytes."""
    engines = StandIns()
    pol = Policy(singular_min_input_tokens=256, singular_max_output_tokens=8)
    cached = block_hashes(PROMPT, BLOCK)[:1]
    status, ids, pdd, _ = _run(engines, PROMPT, 4, pol, prepare=lambda r: r.md_cache.insert(cached))
    assert status == 200 and ids == _reference(PROMPT, 4)
    assert pdd["pipeline"] == "p_rld_md" and pdd["singular_flow"] and pdd["handoff_mode"] == "relay_finish"
    assert pdd["transfer_aborted"] and pdd["transfer_abort_reason"] == "singular_flow"
    assert pdd["decode_cached_tokens"] == 0 and pdd["wan_kv_bytes"] == 0
    assert pdd["wan_kv_bytes_saved"] == kv_transfer_bytes(300 - 128, KVB, BLOCK)
    assert pdd["relay_tokens"] == 4 and pdd["main_tokens"] == 0 and pdd["prefill_ms"] >= 0
    assert engines.seen["MD"] == [] and len(engines.seen["P"]) == 1


def test_relay_only_ablation_plans_no_handoff():
    engines = StandIns()
    status, ids, pdd, _ = _run(engines, PROMPT, 5, Policy(relay_only_pipeline=True, singular_min_input_tokens=256))
    assert status == 200 and ids == _reference(PROMPT, 5)
    assert pdd["pipeline"] == "p_rld" and pdd["handoff_mode"] == "none" and not pdd["singular_flow"]
    assert not pdd["transfer_aborted"] and pdd["transfer_abort_reason"] == ""
    assert pdd["wan_kv_bytes"] == 0 and pdd["wan_kv_bytes_saved"] == 0 and pdd["decode_cached_tokens"] == 0
    assert engines.seen["MD"] == []


@pytest.mark.parametrize("stops", [True, False])
def test_relay_finishing_first(stops):
    """Stopping MD's pull is an abort that saves nothing live (the engine's read goes on); a pull
    left to drain is no abort. Either way its bytes are on the WAN."""
    engines = StandIns(token_s=0.005, pull_s=1.0)
    status, ids, pdd, _ = _run(engines, PROMPT, 4, Policy(relay_finish_stops_wan_kv=stops))
    assert status == 200 and ids == _reference(PROMPT, 4)
    assert pdd["pipeline"] == "p_rld_md" and pdd["handoff_mode"] == "relay_finish" and not pdd["singular_flow"]
    assert pdd["transfer_aborted"] is stops
    assert pdd["transfer_abort_reason"] == ("relay_finish" if stops else "")
    assert pdd["wan_kv_bytes"] == kv_transfer_bytes(300, KVB, BLOCK) and pdd["wan_kv_bytes_saved"] == 0
    assert pdd["main_tokens"] == 0 and len(engines.seen["MD"]) == 1


def test_md_failing_to_take_the_kv_is_an_abort_the_user_does_not_see():
    engines = StandIns(token_s=0.02, md_fails=True)
    status, ids, pdd, _ = _run(engines, PROMPT, 10)
    assert status == 200 and ids == _reference(PROMPT, 10)
    assert pdd["transfer_aborted"] and pdd["transfer_abort_reason"] == "md_error" and "NIXL" in pdd["md_error"]
    assert pdd["handoff_mode"] == "relay_finish" and pdd["relay_tokens"] == 10 and pdd["wan_kv_bytes_saved"] == 0


@pytest.mark.parametrize("mode", ["one_shot", "catch_up"])
def test_handoff_continues_the_sequence_on_md(mode):
    engines = StandIns(token_s=0.02)
    status, ids, pdd, _ = _run(engines, PROMPT, 30, Policy(handoff_mode=mode, catch_up_batch_tokens=1),
                               min_relay_tokens=3)
    assert status == 200 and ids == _reference(PROMPT, 30), pdd
    assert pdd["pipeline"] == "p_rld_md" and pdd["handoff_mode"] == mode
    assert not pdd["transfer_aborted"] and pdd["transfer_abort_reason"] == ""
    assert pdd["relay_tokens"] >= 3 and pdd["main_tokens"] > 0 and pdd["relay_tokens"] + pdd["main_tokens"] == 30
    assert pdd["wan_kv_bytes"] == kv_transfer_bytes(300, KVB, BLOCK) and pdd["wan_token_id_bytes"] > 0
    assert pdd["handoff_ms"] is not None and pdd["wan_kv_ms"] is not None
    assert (pdd["catch_up_rounds"] >= 1) == (mode == "catch_up")


def test_high_hit_goes_straight_to_md():
    engines = StandIns()
    status, ids, pdd, _ = _run(engines, PROMPT, 6, Policy(relay_ttft_budget_fraction=1e6))
    assert status == 200 and ids == _reference(PROMPT, 6)
    assert pdd["pipeline"] == "p_md" and pdd["handoff_mode"] == "none" and pdd["main_tokens"] == 6
    assert pdd["wan_kv_bytes"] == kv_transfer_bytes(300, KVB, BLOCK) and not pdd["transfer_aborted"]
    assert engines.seen["RLD"] == []


def test_engine_errors_reach_the_client_as_http_errors():
    status, _, _, text = _run(StandIns(p_fails=True), PROMPT, 4)
    assert status == 500 and "P is down" in text
    status, _, _, text = _run(StandIns(), PROMPT, 4, prefill=f"http://127.0.0.1:{free_port()}")
    assert status == 502 and "engine unreachable" in text


@pytest.mark.parametrize("slots, mode", [(1, "one_shot"), (8, "catch_up")])
def test_adaptive_handoff_counts_relay_load_in_relay_slots(slots, mode):
    """One request in flight is a full relay of one slot (One-Shot frees it) but light load on eight."""
    pol = Policy(catch_up_threshold_tokens=1, catch_up_batch_tokens=1)
    status, ids, pdd, _ = _run(StandIns(token_s=0.02), PROMPT, 30, pol, min_relay_tokens=3, relay_slots=slots)
    assert status == 200 and ids == _reference(PROMPT, 30)
    assert pdd["handoff_mode"] == mode, pdd


def test_router_process_takes_its_config_as_json():
    """`python -m pddbench.live.pdd_router --config JSON`, as the live runtime starts it: the
    policy crosses the process boundary intact (here: the relay-only ablation)."""
    import subprocess
    import sys
    import time

    async def go():
        engines = StandIns()
        urls = await engines.start()
        port = free_port()
        cfg = _cfg(Policy(relay_only_pipeline=True), urls=urls)
        proc = subprocess.Popen([sys.executable, "-m", "pddbench.live.pdd_router", "--port", str(port),
                                 "--config", cfg.model_dump_json()], stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    _, w = await asyncio.open_connection("127.0.0.1", port)
                    w.close()
                    break
                except OSError:
                    assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read().decode()
                    await asyncio.sleep(0.1)
            return await _ask(f"http://127.0.0.1:{port}", PROMPT, 3)
        finally:
            proc.terminate()
            proc.wait(timeout=10)
            await engines.stop()

    status, ids, pdd, _ = asyncio.run(asyncio.wait_for(go(), 90))
    assert status == 200 and ids == _reference(PROMPT, 3) and pdd["pipeline"] == "p_rld"
