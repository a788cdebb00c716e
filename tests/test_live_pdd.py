"""The PDD router on real vLLM engines (CPU build, tiny model): P, RLD and MD on loopback with the
NixlConnector. With greedy decoding the client must receive exactly the single-instance token
sequence whatever path and handoff the router takes. On loopback MD has the KV within a second:
outputs that must see a handoff are long (400 tokens) so the relay does not finish first, and
`min_relay_tokens` holds each handoff until the relay has produced a few tokens.

Equivalence, decided (see `_equivalence`): the PDD ids must equal the single-instance greedy ids,
except where two float paths may legitimately disagree. MD recomputes the eager tokens in a
prefill and decodes from KV pulled over NIXL; on a host without AVX-512 vLLM CPU falls back from
oneDNN to torch linear and a near-tie can flip many tokens after the handoff. So the reference is
asked for its top-2 logprobs (`logprobs: 2`, ids as `token_id:N`); at the first diverging
position the PDD token must be the reference's runner-up with a logprob gap <= TIE_NATS (at most
MAX_NEAR_TIES of them wider than the logits' rounding, ROUNDING_NATS), and
from there on the comparison continues against a fresh reference from the same prefix (P
continues prompt + PDD ids so far). The first HANDOFF_WINDOW tokens from MD must equal the
reference exactly: a lost or repeated token at the cut fails, as does any divergence that is not
such a near-tie. The router itself forwards no logprobs (its chunks carry `logprobs: null`);
the test does not need them."""

import asyncio
import os
import time

import aiohttp
import pytest
from aiohttp import web

from pddbench.live.engines import EngineGroup, EngineSpec, vllm_available
from pddbench.live.net import free_port, free_port_base
from netem.profile import LinkProfile
from pddbench.live.pdd_router import RouterConfig, make_app
from pddbench.live.prompts import prompt_tokens
from pddbench.live.sse import DONE, SSEParser
from pddbench.schema.scenario import Policy

pytestmark = pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed (`make test` installs it)")

# A near-tie: the reference's top two candidates within this many nats at the diverging position.
# The tiny model's logits are bf16 (an ulp is 1/64-1/16 for |logit| in 2-8); two float paths that
# differ by a few ulps can swap candidates closer than this, not ones further apart.
TIE_NATS = 0.1
HANDOFF_WINDOW = 8  # the first tokens from MD after the cut must be the reference's, exactly
MAX_NEAR_TIES = 4   # near-ties wider than ROUNDING_NATS accepted per request (each re-anchors the reference)
# Candidates this close are equal within the bf16 logits' rounding (one ulp for |logit| < 2):
# either float path may pick either, as often as the sequence revisits them. The tiny model falls
# into loops that revisit one such pair every few tokens (seen: 5 flips at 1/256 nats in 400
# tokens), so these are not counted against MAX_NEAR_TIES; MAX_DIVERGENCES bounds the work.
ROUNDING_NATS = 1 / 128
MAX_DIVERGENCES = 32


@pytest.fixture(scope="module")
def engines(tmp_path_factory, tiny_model):
    model = tiny_model
    base = free_port_base([1, 2, 3, 101, 102, 103])
    specs = [EngineSpec("P", model, base + 1, cpu=0, kv_role="kv_producer", side_channel_port=base + 101),
             EngineSpec("RLD", model, base + 2, cpu=1, kv_role="kv_consumer", side_channel_port=base + 102),
             EngineSpec("MD", model, base + 3, cpu=0, kv_role="kv_consumer", side_channel_port=base + 103)]
    with EngineGroup(specs, tmp_path_factory.mktemp("logs")) as group:
        # NIXL handshakes (P-RLD, P-MD) happen on first use: do them before any timing matters
        _through_router(group, [([7000, 7001], 200, 2)], relay_ttft_budget_fraction=1e6)
        _through_router(group, [([7010, 7011], 200, 2)], min_relay_tokens=0)
        yield group


async def _complete(session, url, prompt, n, stream=True):
    body = {"model": "tiny", "prompt": prompt, "max_tokens": n, "min_tokens": n, "ignore_eos": True,
            "temperature": 0.0, "stream": stream, "return_token_ids": True}
    async with session.post(url + "/v1/completions", json=body) as resp:
        assert resp.status == 200, await resp.text()
        if not stream:
            j = await resp.json()
            return j["choices"][0]["token_ids"], j.get("pdd")
        ids, pdd, parser = [], None, SSEParser()
        async for chunk in resp.content.iter_any():
            for ev in parser.feed(chunk):
                if ev is DONE:
                    continue
                assert "error" not in ev, ev
                for ch in ev.get("choices") or []:
                    ids += ch.get("token_ids") or []
                pdd = ev.get("pdd", pdd)
        return ids, pdd


async def _reference(session, url, prompt, n):
    """P alone, greedy: (ids, per position {id: logprob} of the top-2 candidates and the pick)."""
    body = {"model": "tiny", "prompt": prompt, "max_tokens": n, "min_tokens": n, "ignore_eos": True,
            "temperature": 0.0, "stream": False, "return_token_ids": True, "logprobs": 2,
            "return_tokens_as_token_ids": True}
    async with session.post(url + "/v1/completions", json=body) as resp:
        assert resp.status == 200, await resp.text()
        ch = (await resp.json())["choices"][0]
    tops = [{int(k.removeprefix("token_id:")): v for k, v in (top or {}).items()} for top in ch["logprobs"]["top_logprobs"]]
    assert len(tops) == len(ch["token_ids"]) == n, (len(tops), len(ch["token_ids"]), n)
    return ch["token_ids"], tops


def near_tie(top: dict, want: int, got: int) -> float | None:
    """The logprob gap when `got` is the reference's runner-up behind `want`, else None."""
    ranked = sorted(top.items(), key=lambda kv: -kv[1])[:2]
    if len(ranked) < 2 or ranked[0][0] != want or ranked[1][0] != got:
        return None
    return ranked[0][1] - ranked[1][1]


async def _equivalence(session, url, prompt, got, pdd, ref, tops):
    """Compare the PDD ids with the reference as the module docstring says. Returns
    {"verdict": "equal" | "near_ties" | "near_tie_at_handoff" | "mismatch", "divergences": [...]}."""
    n = len(ref)
    cut = pdd["relay_tokens"] if pdd.get("main_tokens") else None
    window = range(cut, min(n, cut + HANDOFF_WINDOW)) if cut is not None else range(0)
    divergences, start = [], 0
    if len(got) != n:
        return {"verdict": "mismatch", "why": f"{len(got)} ids, {n} expected", "divergences": divergences}
    while True:
        d = next((i for i in range(start, n) if got[i] != ref[i]), None)
        if d is None:
            return {"verdict": "near_ties" if divergences else "equal", "divergences": divergences,
                    "handoff_window": [window.start, window.stop] if cut is not None else None}
        gap = near_tie(tops[d], ref[d], got[d])
        divergences.append({"at": d, "cut": cut, "reference": ref[d], "pdd": got[d], "gap_nats": gap,
                            "top": tops[d], "context": {"reference": ref[max(0, d - 3):d + 3],
                                                        "pdd": got[max(0, d - 3):d + 3]}})
        wide = sum(1 for div in divergences if (div["gap_nats"] or 0.0) > ROUNDING_NATS)
        if gap is None or gap > TIE_NATS or wide > MAX_NEAR_TIES or len(divergences) > MAX_DIVERGENCES:
            return {"verdict": "mismatch", "divergences": divergences}
        if d in window:
            return {"verdict": "near_tie_at_handoff", "divergences": divergences}
        # the same prefix as the PDD stream from here on: P continues it
        if d + 1 < n:
            cont, cont_tops = await _reference(session, url, prompt + got[:d + 1], n - d - 1)
            ref, tops = got[:d + 1] + cont, [{}] * (d + 1) + cont_tops
        start = d + 1


def _through_router(group, cases, **overrides):
    """Each (hash ids, prompt tokens, output tokens) through a fresh router and straight to P
    (the single-instance reference, with logprobs); returns [(reference ids, PDD ids, pdd
    account, equivalence)]. A near-tie inside the handoff window (a legitimate float-path flip
    that this test cannot tell from a bug there) is tried again with a fresh prompt, twice at
    most: a bug at the cut shows on every prompt."""
    p, rld, md = (e.spec.url for e in group.engines)
    over = {"min_relay_tokens": 5, **overrides}
    pol = Policy(**{k: v for k, v in over.items() if k in Policy.model_fields})
    cfg = RouterConfig(policy=pol, prefill=p, relay=rld, main=md, kv_bytes_per_token=2048, kv_block_tokens=128,
                       relay_slots=8, wan=LinkProfile(rate_gbps=1.0, delay_ms=30.0), ttft_sla_ms=1.0,
                       **{k: v for k, v in over.items() if k not in Policy.model_fields})

    async def go():
        runner = web.AppRunner(make_app(cfg))
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        out = []
        try:
            async with aiohttp.ClientSession() as s:
                for hashes, length, n in cases:
                    for attempt in range(3):
                        prompt = prompt_tokens([h + 100_000 * attempt for h in hashes], length, 128, 16, 1024)
                        ref, tops = await _reference(s, p, prompt, n)
                        got, pdd = await _complete(s, f"http://127.0.0.1:{port}", prompt, n)
                        eq = await _equivalence(s, p, prompt, got, pdd, ref, tops)
                        eq["attempt"] = attempt
                        if eq["verdict"] != "near_tie_at_handoff":
                            break
                    if eq["divergences"]:
                        print(f"equivalence {hashes}: {eq}")
                    out.append((ref, got, pdd, eq))
        finally:
            await runner.cleanup()
        return out
    return asyncio.run(go())


def _until_handoff(group, hashes, length, n, **overrides):
    """One request through a fresh router; again with a fresh prompt (up to 3 times) when the
    relay finished before MD had the KV, which a loaded machine can cause."""
    for attempt in range(3):
        res = _through_router(group, [([h + 1000 * attempt for h in hashes], length, n)], **overrides)
        if res[0][2]["handoff_mode"] != "relay_finish":
            return res
    _check(res)  # the client still got exactly the single-instance sequence
    pytest.skip("MD never had the KV before the relay finished (3 tries): seen on a loaded machine after "
                "cancelled MD pulls; an open problem noted on the PDD issue")


def _check(results):
    for ref, got, pdd, eq in results:
        assert eq["verdict"] in ("equal", "near_ties"), (eq, pdd, ref, got)
        assert len(got) == len(ref) and pdd["relay_tokens"] + pdd["main_tokens"] == len(ref), pdd


def test_equivalence_tells_a_near_tie_from_a_lost_or_repeated_token(monkeypatch):
    """The decision itself, on made-up sequences (no engines): cut at 4, window 4..11."""
    import sys

    ref = list(range(100, 140))
    top = lambda i, runner=999, gap=0.05: {ref[i]: -1.0, runner: -1.0 - gap}  # noqa: E731
    tops = [top(i) for i in range(len(ref))]
    pdd = {"relay_tokens": 4, "main_tokens": 36}

    async def fake_reference(_s, _u, prompt, n):  # P continues whatever prefix it is given
        return [200 + i for i in range(n)], [{200 + i: -1.0, 998: -1.5} for i in range(n)]
    monkeypatch.setattr(sys.modules[__name__], "_reference", fake_reference)
    eq = lambda got, t=tops: asyncio.run(_equivalence(None, "", [1], got, pdd, ref, t))  # noqa: E731

    assert eq(ref)["verdict"] == "equal"
    assert eq(ref[:4] + ref[5:] + [0])["verdict"] == "mismatch"          # a token lost at the cut
    assert eq(ref[:5] + ref[4:-1])["verdict"] == "mismatch"              # a token repeated at the cut
    assert eq(ref[:20] + ref[21:] + [0])["verdict"] == "mismatch"        # lost later: not the runner-up
    flip = ref[:20] + [999] + [200 + i for i in range(19)]
    res = eq(flip)
    assert res["verdict"] == "near_ties" and res["divergences"][0]["at"] == 20, res
    far = [top(i, gap=0.5) for i in range(len(ref))]
    assert eq(flip, far)["verdict"] == "mismatch"                        # candidates too far apart
    assert eq(ref[:6] + [999] + ref[7:])["verdict"] == "near_tie_at_handoff"
    assert eq(ref[:20] + [999] + [7] * 19)["verdict"] == "mismatch"      # after the re-anchor: wrong


@pytest.mark.parametrize("gap, verdict", [(1 / 256, "near_ties"), (0.0, "near_ties"), (0.05, "mismatch")])
def test_equivalence_counts_near_ties_wider_than_rounding(monkeypatch, gap, verdict):
    """Six flips after the handoff window, each to the reference's runner-up: ties within the bf16
    rounding may recur without limit; wider ones only MAX_NEAR_TIES times."""
    import sys

    n, flips = 60, [14, 20, 26, 32, 38, 44]
    got = [300 + i for i in range(n)]

    def pick(i):  # the reference's own pick: at a flip, another token with PDD's as its runner-up
        return 900 + i if i in flips else got[i]

    def top(i):
        return {pick(i): -1.0, got[i]: -1.0 - gap} if i in flips else {got[i]: -1.0, 999: -2.0}

    async def fake_reference(_s, _u, _prompt, k):  # continues the PDD prefix it is given
        return [pick(i) for i in range(n - k, n)], [top(i) for i in range(n - k, n)]
    monkeypatch.setattr(sys.modules[__name__], "_reference", fake_reference)
    ref, tops = asyncio.run(fake_reference(None, "", [1], n))
    res = asyncio.run(_equivalence(None, "", [1], got, {"relay_tokens": 4, "main_tokens": n - 4}, ref, tops))
    assert res["verdict"] == verdict, res
    assert [d["at"] for d in res["divergences"]] == (flips if verdict == "near_ties" else flips[:MAX_NEAR_TIES + 1])


@pytest.mark.parametrize("mode", ["one_shot", "catch_up"])
def test_handoff_keeps_the_greedy_sequence(engines, mode):
    res = _until_handoff(engines, [7100, 7101, 7102, 7103, 7104, 7105], 700, 400, handoff_mode=mode,
                         catch_up_batch_tokens=4)
    res += _through_router(engines, [([7110, 7111, 7112], 300, 12)], handoff_mode=mode, catch_up_batch_tokens=4)
    _check(res)
    pdd = res[0][2]
    assert pdd["pipeline"] == "p_rld_md" and pdd["handoff_mode"] == mode, pdd
    assert pdd["relay_tokens"] >= 5 and pdd["wan_token_id_bytes"] > 0 and pdd["wan_kv_ms"] is not None, pdd
    if mode == "catch_up":
        assert pdd["catch_up_rounds"] >= 1, pdd
    assert pdd["main_tokens"] > 0 and pdd["handoff_ms"] is not None, pdd


def test_requests_ending_around_the_handoff(engines):
    """Output of exactly the held relay tokens (the relay finishes before any handoff) and one
    more (it may finish while MD catches up): either way nothing is lost or repeated."""
    res = _through_router(engines, [([7200, 7201, 7202], 300, 5), ([7210, 7211, 7212], 300, 6),
                                    ([7220, 7221, 7222], 300, 7)], handoff_mode="catch_up", catch_up_batch_tokens=1)
    _check(res)
    assert res[0][2]["main_tokens"] == 0 and res[0][2]["relay_tokens"] == 5
    for _ref, _got, pdd, _eq in res:  # a request that ended on the relay is labelled so, as in the simulator
        assert (pdd["handoff_mode"] == "relay_finish") == (pdd["main_tokens"] == 0), pdd


def test_adaptive_mode_follows_pending_tokens(engines):
    few = _until_handoff(engines, [7300, 7301, 7302], 300, 400, catch_up_threshold_tokens=1000)
    many = _until_handoff(engines, [7310, 7311, 7312], 300, 400, catch_up_threshold_tokens=2, catch_up_batch_tokens=4)
    _check(few + many)
    assert few[0][2]["handoff_mode"] == "one_shot", few[0][2]
    assert many[0][2]["handoff_mode"] == "catch_up", many[0][2]


def test_singular_flow_and_high_hit_pipelines(engines):
    md = engines.engines[2]
    before = md.metrics()
    singular = _through_router(engines, [([7400, 7401, 7402, 7403, 7404, 7405], 700, 8)],
                               singular_min_input_tokens=512, singular_max_output_tokens=8)
    after = md.metrics()
    _check(singular)
    s = singular[0][2]
    assert s["singular_flow"] and s["handoff_mode"] == "relay_finish" and s["wan_kv_bytes"] == 0
    assert s["transfer_aborted"] and s["transfer_abort_reason"] == "singular_flow" and s["decode_cached_tokens"] == 0
    assert s["wan_kv_bytes_saved"] == 768 * 2048  # 700 tokens: six whole 128-token blocks
    assert after["prompt_tokens"] == before["prompt_tokens"], "MD must not see a singular flow"
    direct = _through_router(engines, [([7500, 7501, 7502], 300, 8)], relay_ttft_budget_fraction=1e6)
    _check(direct)
    assert direct[0][2]["pipeline"] == "p_md" and direct[0][2]["relay_tokens"] == 0


def test_md_takes_the_prompt_from_its_prefix_cache(engines):
    """The handoff request's prompt part must be a prefix-cache hit on MD (pulled over the WAN),
    not recomputed: MD computes locally only the tail block and the eager tokens."""
    md = engines.engines[2]
    for attempt in range(4):  # on a loaded machine the relay may finish first: then MD never takes over
        time.sleep(2)  # vLLM's counters trail the responses a little
        before = md.metrics()
        hashes = [7600 + 10 * attempt + i for i in range(6)]
        res = _through_router(engines, [(hashes, 700, 400)], handoff_mode="one_shot")
        _check(res)
        if res[0][2]["main_tokens"] > 0:
            break
    assert res[0][2]["main_tokens"] > 0, res[0][2]
    time.sleep(2)
    after = md.metrics()
    assert after["external_kv_transfer_tokens"] - before["external_kv_transfer_tokens"] >= 640
    assert after["prefix_cache_hit_tokens"] - before["prefix_cache_hit_tokens"] >= 640
    eager = res[0][2]["relay_tokens"]  # MD recomputes the prompt's partial last block (60) and the eager tokens
    assert after["local_compute_tokens"] - before["local_compute_tokens"] <= 60 + eager + 8


def test_each_engine_stays_on_its_core(engines):
    """Every thread of every engine process (server, scheduler, worker, NIXL) may run only on the
    engine's core: vLLM's NIXL worker otherwise moves the compute thread to the last core."""
    from pathlib import Path

    for e in engines.engines:
        pgid = e.proc.pid
        pids = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _pgid(int(p.name)) == pgid]
        assert len(pids) >= 3, (e.spec.name, pids)  # API server, engine core, worker
        for pid in pids:
            for task in Path(f"/proc/{pid}/task").iterdir():
                try:
                    assert os.sched_getaffinity(int(task.name)) == {e.spec.cpu}, (e.spec.name, pid, task.name)
                except ProcessLookupError:  # a thread that just ended
                    pass


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def test_relay_transfer_calibration_on_real_engines(engines):
    """The dual-path relay calibration on real engines: RLD answers one token from P's KV while P
    serves MD's second lease and MD pulls it; every row is such an answer, and the rows fit a link
    the PDD twin can take (pddbench fidelity puts it on network.rdma)."""
    from pddbench.live.client import run_sync
    from pddbench.live.engine_calibration import fit_link, measure_relay_transfer

    p, rld, md = (e.spec.url for e in engines.engines)
    rows = run_sync(measure_relay_transfer(p, rld, md, 2048, reps=2, sizes=(128, 512, 1024)))
    assert [r["tokens"] for r in rows] == [128, 512, 1024] * 2
    assert all(r["kv_bytes"] == r["tokens"] * 2048 and 0 < r["transfer_ms"] < 60_000 for r in rows)
    link = fit_link(rows)
    assert link["delay_ms"] >= 0 and (link["rate_gbps"] is None or link["rate_gbps"] > 0)


def test_serve_pdd_router_counts_what_it_served(engines, tmp_path):
    """`pddbench serve pdd-router` before the same engines (issue 28.5): its /metrics add up to the
    `pdd` accounts of the requests it answered, /health/engines sees all three, Ctrl-C stops it."""
    import json
    import re
    import signal
    import subprocess
    import sys
    import urllib.request

    from tests.conftest import REPO

    p, rld, md = (e.spec for e in engines.engines)
    inv = tmp_path / "fleet.yaml"
    inv.write_text(json.dumps({s.name: {"url": s.url, "kv_side_channel": f"127.0.0.1:{s.side_channel_port}"}
                               for s in (p, rld, md)}))
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "pddbench", "serve", "pdd-router", "live/pdd", "--inventory", str(inv),
                             "--set", f"live.model_dir={p.model_dir}", "--port", str(port), "--log", str(tmp_path / "log")],
                            stderr=subprocess.PIPE, text=True, cwd=REPO,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    url = f"http://127.0.0.1:{port}"

    async def go():
        async with aiohttp.ClientSession() as s:
            for _ in range(600):
                assert proc.poll() is None, proc.stderr.read()[-2000:]
                try:
                    async with s.get(url + "/health/engines") as r:
                        health = (r.status, await r.json())
                        break
                except aiohttp.ClientError:
                    await asyncio.sleep(0.2)
            accounts = [(await _complete(s, url, prompt_tokens([9000 + 3 * i, 9001 + 3 * i, 9002 + 3 * i], 300, 128, 16, 1024), 40))[1] for i in range(3)]
            async with s.get(url + "/metrics") as r:
                return health, accounts, await r.text()
    try:
        health, accounts, metrics = asyncio.run(go())
    finally:
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(timeout=60)
    assert rc == 130, proc.stderr.read()[-2000:]  # a clean stop by Ctrl-C: 130, as every command
    assert health == (200, {"status": "ok", "engines": {"P": "ok", "RLD": "ok", "MD": "ok"}})
    counted = {m[0]: float(m[1]) for m in re.findall(r'pddbench_requests_total\{pipeline="(\w+)",status="200"\} (\S+)', metrics)}
    served = {}
    for a in accounts:
        served[a["pipeline"]] = served.get(a["pipeline"], 0) + 1
    assert counted == served, (counted, served)
    wan = float(re.search(r"^pddbench_wan_kv_bytes_total (\S+)$", metrics, re.M).group(1))
    assert wan == sum(a["wan_kv_bytes"] for a in accounts)
    lines = [json.loads(x) for x in (tmp_path / "log").read_text().splitlines()]
    assert sum(x["event"] == "request" for x in lines) == 3 and lines[-1]["event"] == "stop"
