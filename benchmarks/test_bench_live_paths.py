"""Benchmarks of the live paths' hot loops (`make bench`, gated at a 20% slowdown of min): the
replay client's SSE parsing and arrival schedule, and the netem delay line's per-packet decision."""

from netem import load_profile
from netem.scheduler import DelayScheduler
from pddbench.live.schedule import at_rate
from pddbench.live.sse import SSEParser

CHUNK = b'data: {"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":" a","logprobs":null,' \
        b'"finish_reason":null}],"usage":null}\n\n'


def test_replay_client_sse_parsing(benchmark):
    stream = [CHUNK] * 2000 + [b"data: [DONE]\n\n"]

    def run():
        parser = SSEParser()
        n = 0
        for chunk in stream:
            n += len(parser.feed(chunk))
        return n
    assert benchmark(run) == 2001


def test_replay_client_arrival_schedule(benchmark):
    assert len(benchmark(lambda: at_rate(20_000, 200.0, "poisson", seed=0))) == 20_000


def test_delay_line_per_packet_decisions(benchmark):
    profile = load_profile("lossy-wan")

    def run():
        sched = DelayScheduler(profile, "forward")
        kept = 0
        for i in range(50_000):
            if sched.release_time(i * 0.01) is not None:
                kept += 1
        return kept
    assert benchmark(run) > 40_000
