"""The emulated WAN for real: namespaces, veth, TBF, NFQUEUE delay lines, real UDP and TCP.
Needs root and iptables (the README's test command installs iptables); skipped otherwise."""

import math
import os
import shutil
import statistics
import subprocess
from contextlib import contextmanager

import pytest

from netem import load_profile
from netem.calibrate import calibrate, measure_goodput, measure_rtt, rtt_explained
from netem.manager import down, probe, up
from netem.profile import LinkProfile, Outages
from netem.topology import DC_A, DC_B, PREFIX, our_namespaces
from tests.conftest import run_cli

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces and qdiscs"),
    pytest.mark.skipif(shutil.which("iptables") is None, reason="needs iptables (apt-get install iptables)"),
]
A, B, B_ADDR = DC_A.netns, DC_B.netns, DC_B.address


@contextmanager
def link(profile: LinkProfile):
    down()
    up(profile)
    try:
        yield
    finally:
        down()


@pytest.fixture(scope="module", autouse=True)
def clean_host():
    down()
    yield
    down()


def _first_good(measure, good, attempts: int = 3):
    """A shared VM sometimes stalls every process for a few hundred ms (once in CI: ~20 of 200
    probes late by up to 240 ms). Such a window is measured again; an emulator that is wrong
    fails every attempt, and the failure shows them all."""
    tries = []
    for _ in range(attempts):
        tries.append(measure())
        if good(tries[-1]):
            return tries[-1]
    pytest.fail(f"no good measurement in {attempts} attempts: {tries}")


def test_fixed_30ms_rtt():
    def measure():
        with link(load_profile("fixed-30ms")):
            return calibrate(probes=200, interval_ms=10, bulk_seconds=0)

    # the delay is right, the link valid, and the p99 excess explained by the lines' own lateness
    # (netem.calibrate.rtt_explained); absolute p99 under CPU load: benchmarks/test_bench_netem.py
    res = _first_good(measure, lambda r: rtt_explained(r, 30.0))
    assert res["backend"] in ("tbf+nfqueue", "kernel-netem")
    assert res["tcp"]["a"]["net.ipv4.tcp_wmem"].split()[-1] == "67108864"
    if res["backend"] == "tbf+nfqueue":  # how the delay lines ran is on the record
        for d in ("forward", "reverse"):
            sched = res["scheduling"]["delay_lines"][d]
            assert sched["policy"] in ("SCHED_FIFO", "SCHED_OTHER") and "spin_us" in sched, sched
            assert sched["policy"] == "SCHED_FIFO" or sched.get("fallback_reason"), sched
        assert res["scheduling"]["tools"]["policy"] in ("SCHED_FIFO", "SCHED_OTHER")


def test_normal_jitter_with_reordering_sd():
    prof = LinkProfile(forward={"delay_ms": 30, "jitter": {"distribution": "normal", "sd_ms": 10, "reorder": True}},
                       reverse={"delay_ms": 0}, seed=3)

    def measure():
        with link(prof):
            rtt = measure_rtt(A, B_ADDR, B, count=600, interval_ms=5)["rtt_ms"]
        # sd from the interquartile range (IQR / 1.349 for a normal): a few probes made late by a
        # busy shared machine must not decide it, as they can for the plain sd
        q1, _, q3 = statistics.quantiles(rtt, n=4)
        return {"iqr_sd_ms": (q3 - q1) / 1.349, "median_ms": statistics.median(rtt)}

    # a stalled window (once in a clean CI run: IQR sd 11.3 ms) is measured again, as above
    _first_good(measure, lambda r: abs(r["iqr_sd_ms"] - 10) <= 1.2 and abs(r["median_ms"] - 30) <= 2)


@pytest.mark.parametrize("rate_gbps", [0.1, 1.0])
def test_rate_limit_goodput(rate_gbps):
    def measure():
        with link(LinkProfile(delay_ms=1, rate_gbps=rate_gbps)):
            return measure_goodput(A, B_ADDR, B, seconds=3)

    res = _first_good(measure, lambda r: 0.90 <= r["throughput_mbps"] / (rate_gbps * 1000) <= 1.0)
    assert res["bytes_received"] == res["bytes_sent"]


def test_outage_stretches_transfer_without_loss():
    nbytes = 25_000_000  # ~2.1 s at 100 Mbit/s
    base = LinkProfile(delay_ms=5, rate_gbps=0.1)
    with link(base):
        plain = measure_goodput(A, B_ADDR, B, nbytes=nbytes)
    held = base.model_copy(update={"outages": Outages(windows_ms=[(800, 5800)])})
    with link(held):
        stalled = measure_goodput(A, B_ADDR, B, nbytes=nbytes)
    assert stalled["bytes_received"] == nbytes == plain["bytes_received"]
    stretch = stalled["elapsed_s"] - plain["elapsed_s"]
    assert 4.0 <= stretch <= 6.5, (plain, stalled)


def test_one_percent_loss_within_binomial_bound():
    prof = LinkProfile(delay_ms=1, forward={"loss": {"model": "bernoulli", "p": 0.01}}, seed=11)
    n = 4000
    with link(prof):
        res = measure_rtt(A, B_ADDR, B, count=n, interval_ms=0.5)
    lost = len(res["lost"])
    sd = math.sqrt(n * 0.01 * 0.99)
    assert abs(lost - n * 0.01) <= 4 * sd, lost


def test_kernel_netem_backend_or_probe_reason():
    info = probe()
    if not info["kernel_netem"]:
        pytest.skip(f"kernel netem backend not exercised here: {info['kernel_netem_reason']}")
    with link(load_profile("fixed-30ms")):
        pass  # the auto backend is kernel-netem on such hosts
    res = run_cli("netem", "up", "fixed-30ms")
    assert res.returncode == 0, res.stderr
    cal = run_cli("netem", "calibrate", "--json", "--bulk-s", "0")
    run_cli("netem", "down")
    assert cal.returncode == 0


def test_cli_up_calibrate_down_and_nothing_left(tmp_path):
    assert run_cli("netem", "up", "fixed-30ms").returncode == 0
    try:
        again = run_cli("netem", "up", "fixed-30ms")
        assert again.returncode == 2 and "already up" in again.stderr
        res = run_cli("netem", "calibrate", "--json", "--probes", "50", "--bulk-s", "1", "--out", tmp_path)
        assert res.returncode == 0, res.stderr
        import json

        cal = json.loads(res.stdout)
        for key in ("rtt_ms", "throughput_mbps", "lateness_ms", "backend", "targets"):
            assert key in cal
        assert set(cal["rtt_ms"]) >= {"p50", "p99", "sd"} and set(cal["lateness_ms"]) >= {"p50", "p99", "max"}
        assert (tmp_path / "calibration.json").is_file()
    finally:
        assert run_cli("netem", "down").returncode == 0
    assert run_cli("netem", "down").returncode == 0  # idempotent
    assert our_namespaces() == []
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert PREFIX not in links
    assert subprocess.run(["pgrep", "-f", "netem.delayline"], capture_output=True).returncode == 1


def test_down_cleans_a_crashed_run():
    up(load_profile("fixed-30ms"))
    # a crash: the state folder is lost while namespaces and delay lines live on
    from netem.manager import STATE_DIR

    shutil.rmtree(STATE_DIR)
    assert our_namespaces()
    down()
    assert our_namespaces() == []
    assert subprocess.run(["pgrep", "-f", "netem.delayline"], capture_output=True).returncode == 1
