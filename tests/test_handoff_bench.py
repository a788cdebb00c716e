"""`pddbench handoff-bench`: real bytes over real sockets (the emulated WAN when root)."""

import json
import os
import shutil
import socket
import threading

import pytest

from pddbench.live import handoff_wire
from tests.conftest import REPO, run_cli



def test_wire_delivers_every_byte_and_reports_arrival():
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]
    srv.close()
    t = threading.Thread(target=handoff_wire.serve, args=("127.0.0.1", port, 1 << 20), daemon=True)
    t.start()
    from pddbench.live.net import wait_port

    wait_port("127.0.0.1", port)
    rows = handoff_wire.measure("127.0.0.1", port, tokens=10, kv_bytes_per_token=1000, trials=3, seed=1)
    assert len(rows) == 3
    for r in rows:
        assert r["kv_bytes"] == 10_000
        assert 0 <= r["kv_copy_ms"] <= r["kv_ms"] and r["kv_transfer_ms"] >= 0 and r["token_network_ms"] >= 0
        assert r["token_bytes"] < 200  # 40 B of ids plus a small JSON header


def test_loopback_defaults_match_the_article_payloads(tmp_path):
    res = run_cli("handoff-bench", "--loopback", "--trials", "5", "--json", "--out", tmp_path / "hb", timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    s = json.loads(res.stdout)
    from pddbench.schema.scenario import load_scenario

    # the KV geometry is the default scenario's (paper/pdd), which the article's 4649 KiB implies
    assert s["kv_handoff"]["bytes"] == 100 * load_scenario("paper/pdd").model.kv_bytes_per_token
    assert round(s["kv_handoff"]["kib"]) == 4649
    assert s["token_handoff"]["bytes"] <= 1.5 * 1024
    for side in ("kv_handoff", "token_handoff"):
        lat = s[side]["latency_ms"]
        assert 0 < lat["mean"] <= lat["max"] and lat["p99"] <= lat["max"]
    # the token handoff includes MD's recompute (here the paper scenario's latency model)
    assert s["token_handoff"]["recompute_source"].startswith("model:")
    assert s["token_handoff"]["latency_ms"]["mean"] >= s["token_handoff"]["recompute_ms"]["mean"]
    for name in ("handoff_bench.json", "trials.csv", "handoff_latency_cdf.png"):
        assert (tmp_path / "hb" / name).is_file()


def test_kv_geometry_is_the_scenarios_unless_the_option_overrides_it(tmp_path):
    scenario = tmp_path / "small-kv.yaml"
    scenario.write_text(f"extends: {REPO / 'scenarios' / 'paper' / 'pdd.yaml'}\nmodel:\n  kv_bytes_per_token: 1000\n")
    common = ["handoff-bench", "--loopback", "--trials", "2", "--tokens", "4", "--json"]
    res = run_cli(*common, "--scenario", scenario, "--out", tmp_path / "from-scenario", timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    s = json.loads(res.stdout)
    assert s["kv_handoff"]["bytes"] == 4 * 1000
    meta = json.loads((tmp_path / "from-scenario" / "handoff_bench.json").read_text())
    assert meta["kv_bytes_per_token"] == 1000 and meta["kv_bytes_per_token_from"] == f"scenario {scenario}"
    res = run_cli(*common, "--scenario", scenario, "--kv-bytes-per-token", "300", "--out", tmp_path / "opt",
                  timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert json.loads(res.stdout)["kv_handoff"]["bytes"] == 4 * 300
    # a live scenario states no KV geometry (its served model does): one line, exit 2, no folder
    res = run_cli(*common, "--scenario", "live/pdd", "--out", tmp_path / "live", timeout=120)
    said = [ln for ln in (res.stdout + res.stderr).splitlines() if "Warning" not in ln and "extension_of" not in ln]
    assert res.returncode == 2 and len(said) == 1 and "--kv-bytes-per-token" in said[0], said
    assert not (tmp_path / "live").exists()


def test_results_root_holds_the_default_run_folder(tmp_path):
    """Without --out the run folder goes under --results (it once went to ./results whatever was asked)."""
    res = run_cli("handoff-bench", "--loopback", "--trials", "2", "--tokens", "4", "--json", "--results",
                  tmp_path / "res", timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    runs = list((tmp_path / "res" / "handoff-bench").iterdir())
    assert len(runs) == 1 and (runs[0] / "handoff_bench.json").is_file()
    assert json.loads((runs[0] / "handoff_bench.json").read_text())["link"] == {"profile": "loopback",
                                                                               "backend": "loopback"}


def test_emulated_wan_is_torn_down_when_the_block_fails(monkeypatch):
    """The WAN comes down on an error inside the block (as on Ctrl-C), and a stale one is removed first."""
    import netem.manager as manager
    from pddbench.live.wan import emulated_wan

    calls = []
    monkeypatch.setattr(manager, "down", lambda: calls.append("down"))
    monkeypatch.setattr(manager, "up", lambda profile: calls.append("up") or {"backend": "test"})
    with pytest.raises(KeyboardInterrupt):
        with emulated_wan(object()) as state:
            assert state == {"backend": "test"} and calls == ["down", "up"]
            raise KeyboardInterrupt
    assert calls == ["down", "up", "down"]


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces and qdiscs")
@pytest.mark.skipif(shutil.which("iptables") is None, reason="needs iptables (apt-get install iptables)")
def test_over_the_emulated_wan_each_handoff_pays_the_delay(tmp_path):
    res = run_cli("handoff-bench", "--profile", "fixed-30ms", "--trials", "20", "--json", "--out", tmp_path / "hb",
                  timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    s = json.loads(res.stdout)
    assert s["link"]["profile"] == "fixed-30ms"
    # 15 ms one way: no handoff can arrive sooner; 4.6 MB at 1 Gbit/s needs >= 38 ms more
    assert s["token_handoff"]["network_ms"]["p50"] >= 14.5
    assert s["kv_handoff"]["transfer_ms"]["p50"] >= 14.5 + 4.76e6 * 8 / 1e9 * 1e3 * 0.9
    from netem.topology import our_namespaces

    assert our_namespaces() == []
