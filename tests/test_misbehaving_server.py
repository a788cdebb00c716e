"""The real replay client against a loopback server that answers in each bad way: every request's
failure is recorded with its reason, records and summary are still written, the warm-up times out
on its own short limit, an all-failed replay exits 1, and Ctrl-C marks in-flight requests."""

from __future__ import annotations

import asyncio
import json
import threading

import pandas as pd
import pytest
from aiohttp import web

from pddbench.live import client as client_mod
from pddbench.live.client import LiveRequest, ReplayClient, run_sync
from pddbench.live.net import free_port
from tests.inprocess import cli

GOOD = {"choices": [{"text": "t", "token_ids": [7]}]}
BAD_EVENTS = {  # mode (sent as the model name) -> the events the server streams
    "choices_str": [{"choices": "oops"}],
    "token_ids_str": [{"choices": [{"token_ids": ["a", "b"]}]}],
    "choice_not_object": [{"choices": [5]}],
    "usage_details_int": [GOOD, {"choices": [], "usage": {"prompt_tokens_details": 5}}],
    "cached_tokens_str": [GOOD, {"choices": [], "usage": {"prompt_tokens_details": {"cached_tokens": "many"}}}],
    "event_is_list": [[1, 2]],
    "error_event": [{"error": {"message": "model overloaded, try later", "code": 503}}],
    "good": [GOOD, GOOD],
}
REASONS = {"choices_str": "bad_response: choices is str", "token_ids_str": "bad_response: choices[].token_ids holds",
           "choice_not_object": "bad_response: choices[] is int", "usage_details_int": "bad_response: usage.prompt",
           "cached_tokens_str": "bad_response: usage.prompt_tokens_details.cached_tokens",
           "event_is_list": "bad_response: event is list", "error_event": "server_error: model overloaded, try later"}


class Server:
    """An aiohttp app on its own thread and loop, loopback only; `silent` never answers anything."""

    def __init__(self, silent: bool = False):
        self.port, self.silent, self.hits = free_port(), silent, 0
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()
        assert self.ready.wait(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        app = web.Application()
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_get("/v1/models", self._models)
        runner = web.AppRunner(app)
        self.loop.run_until_complete(runner.setup())
        self.loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", self.port).start())
        self.ready.set()
        self.loop.run_forever()

    async def _models(self, request):
        if self.silent:
            await asyncio.sleep(3600)
        return web.json_response({"data": []})

    async def _completions(self, request):
        self.hits += 1
        body = await request.json()
        if self.silent or body["model"] == "hang":
            await asyncio.sleep(3600)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for ev in BAD_EVENTS[body["model"]]:
            await resp.write(b"data: " + json.dumps(ev).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        return resp

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)


@pytest.fixture
def server():
    s = Server()
    yield s
    s.stop()


def _reqs(n: int) -> list[LiveRequest]:
    return [LiveRequest(i, 0.001 * i, [1, 2, 3], 2) for i in range(n)]


@pytest.mark.parametrize("mode", sorted(REASONS))
def test_each_bad_shape_fails_the_request_with_its_reason(server, mode):
    outcomes, _ = run_sync(ReplayClient(server.url, mode, timeout_s=10).run(_reqs(2)))
    assert [o.failure.startswith(REASONS[mode]) for o in outcomes] == [True, True], [o.failure for o in outcomes]


def test_replay_writes_records_and_summary_and_exits_1_when_all_failed(server, tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": i, "input_length": 8, "output_length": 2, "hash_ids": [i]}) + "\n"
                             for i in range(3)))
    out = tmp_path / "run"
    res = cli("replay", "--endpoint", server.url, "--trace", trace, "--model", "error_event", "--out", out,
              "--timeout-s", "10")
    last = res.err.strip().splitlines()[-1]  # after the progress bar's last frame
    assert res.code == 1 and "Traceback" not in res.err and last.startswith("error: every request failed"), res.err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["requests_failed"] == 3 and summary["requests_completed"] == 0
    records = pd.read_parquet(out / "records.parquet")
    assert set(records["failure_reason"]) == {"server_error: model overloaded, try later"}
    ok = cli("replay", "--endpoint", server.url, "--trace", trace, "--model", "good", "--out", tmp_path / "ok")
    assert ok.code == 0, ok.err


def test_warmup_has_its_own_short_limit(monkeypatch):
    silent = Server(silent=True)
    monkeypatch.setattr(client_mod, "WARM_TIMEOUT_S", 0.5)
    try:
        outcomes, _ = run_sync(asyncio.wait_for(ReplayClient(silent.url, "good", timeout_s=600).run(_reqs(3)), 30))
    finally:
        silent.stop()
    assert all(o.failure.startswith("warmup_timeout") for o in outcomes)
    assert silent.hits == 0  # nothing was sent to a server that never answered the warm-up


def test_ctrl_c_marks_in_flight_requests_interrupted(server):
    reqs = _reqs(2) + [LiveRequest(2, 30.0, [1], 2)]  # the third is not due before the interrupt
    outcomes: list = []

    async def interrupted_run():
        task = asyncio.ensure_future(ReplayClient(server.url, "hang", timeout_s=600).run(reqs, outcomes=outcomes))
        while server.hits < 2:
            await asyncio.sleep(0.01)
        task.cancel()  # what asyncio.Runner does on SIGINT
        await asyncio.gather(task, return_exceptions=True)

    run_sync(interrupted_run())
    from pddbench.live.client import keep_sent

    kept = keep_sent(outcomes)
    assert [o.failure for o in kept] == ["interrupted", "interrupted"]


@pytest.mark.parametrize("url", ["127.0.0.1:8000", "ftp://127.0.0.1", "http://", "http://h:port", "localhost"])
def test_endpoint_that_cannot_be_a_url_is_refused_before_anything(tmp_path, url):
    res = cli("replay", "--endpoint", url, "--trace", tmp_path / "none.jsonl", "--out", tmp_path / "o")
    assert res.code == 2 and res.one_line and "--endpoint" in res.err, res.err
    assert not (tmp_path / "o").exists()
