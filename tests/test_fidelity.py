"""The sim-vs-live fidelity table and the simulated twin of live same-DC PD (its live half runs in
tests/test_live_vllm.py on real vLLM)."""

import json

import numpy as np
import pandas as pd
import pytest

from pddbench.measure.fidelity import PERCENTILES, ttft_table
from tests.conftest import REPO, run_cli


def test_error_is_sim_minus_live_per_percentile():
    live = np.arange(1, 101, dtype=float) * 10        # 10 .. 1000 ms
    rows = ttft_table(live, live * 1.2)
    assert [r["percentile"] for r in rows] == list(PERCENTILES)
    for r in rows:
        assert np.isclose(r["sim_ttft_ms"], 1.2 * r["live_ttft_ms"])
        assert np.isclose(r["error_ms"], r["sim_ttft_ms"] - r["live_ttft_ms"]) and np.isclose(r["error_pct"], 20.0)


def test_twin_scenario_simulates_with_the_shipped_calibration(tmp_path):
    res = run_cli("run", REPO / "scenarios" / "live" / "sim-twin-same-dc-pd.yaml", "--out", tmp_path / "twin")
    assert res.returncode == 0, res.stderr[-2000:]
    s = json.loads((tmp_path / "twin" / "summary.json").read_text())
    assert s["runtime"] == "sim" and s["requests_completed"] == s["requests_total"] > 0
    # a 4K-token prefill on the CPU engine takes ~0.7 s in the calibration: TTFT tails exceed it
    assert s["ttft_ms"]["max"] > 700


def test_cross_dc_twin_sends_kv_over_the_wan_in_whole_blocks(tmp_path):
    res = run_cli("run", REPO / "scenarios" / "live" / "sim-twin-cross-dc-pd.yaml", "--out", tmp_path / "twin")
    assert res.returncode == 0, res.stderr[-2000:]
    rec = pd.read_parquet(tmp_path / "twin" / "records.parquet")
    assert (rec["rdma_kv_bytes"] == 0).all() and (rec["wan_kv_bytes"] > 0).any()
    assert (rec["wan_kv_bytes"] % (128 * 2048) == 0).all()  # vLLM CPU's 128-token blocks, 2 KB per token


def test_each_live_deployment_has_its_twin_or_a_clear_refusal():
    from pddbench.core.errors import UserError
    from pddbench.measure.fidelity import default_twin

    for kind in ("same_dc_pd", "cross_dc_pd", "pdd"):
        assert default_twin(kind).is_file()
    with pytest.raises(UserError, match="--twin"):
        default_twin("colocated")


def test_fidelity_names_what_is_missing(tmp_path):
    res = run_cli("fidelity", tmp_path)
    assert res.returncode == 2 and "records.parquet" in res.stdout + res.stderr
    assert "Traceback" not in res.stderr


def test_kv_link_fit_recovers_delay_and_rate():
    from pddbench.live.engine_calibration import fit_link

    # 5 ms fixed + 1 Gbit/s: 1 MB takes 8 ms more
    rows = [{"kv_bytes": b, "transfer_ms": 5 + b * 8 / 1e9 * 1e3} for b in (1e6, 2e6, 4e6, 8e6) for _ in range(3)]
    rows.append({"kv_bytes": 2e6, "transfer_ms": 900.0})  # one stalled pull: the median ignores it
    link = fit_link(rows)
    assert abs(link["delay_ms"] - 5) < 1e-6 and abs(link["rate_gbps"] - 1.0) < 1e-6
    flat = fit_link([{"kv_bytes": b, "transfer_ms": 25.0} for b in (1e6, 8e6)])
    assert flat == {"delay_ms": 25.0, "rate_gbps": None}


def _records(arrival, prefill_ms, kv_ms, cached):
    import pandas as pd

    arrival = np.asarray(arrival, dtype=float)
    return pd.DataFrame({"request_id": range(len(arrival)), "input_tokens": 1000, "p_cached_tokens": cached,
                         "arrival_ms": arrival, "prefill_end_ms": arrival + prefill_ms,
                         "first_token_ms": arrival + prefill_ms + kv_ms, "ttft_ms": prefill_ms + kv_ms})


def test_busy_decoder_extra_is_the_busy_check_less_what_the_twin_models(tmp_path):
    from pddbench.core.errors import InputError, UserError
    from pddbench.measure.fidelity import _busy_extra

    class Steps:  # 2 ms + 1 ms per sequence in the batch
        def decode_ms(self, batch, kv_tokens, extend_tokens=0):
            return 2.0 + batch

    csv = tmp_path / "kv_transfer_busy_check.csv"
    csv.write_text("state,tokens,transfer_ms\n" + "".join(
        f"idle,512,{a}\np_busy,512,99\nd_busy,512,{b}\n" for a, b in ((20, 40), (22, 41), (900, 45))))
    # medians 22 and 41; modelled: step of 3 vs 1 (5 - 3 = 2) + half a step of 2 (2) = 4
    assert _busy_extra(csv, Steps()) == {"idle_ms": 22.0, "busy_ms": 41.0, "modelled_ms": 4.0, "extra_ms": 15.0}
    csv.write_text("state,tokens,transfer_ms\nidle,512,30\nd_busy,512,31\n")
    assert _busy_extra(csv, Steps())["extra_ms"] == 0.0  # never negative
    # PDD's relay rows are read the same way; a run made before them has none (optional: None)
    assert _busy_extra(csv, Steps(), "rld_idle", "rld_busy", optional=True) is None
    csv.write_text("state,tokens,transfer_ms\nidle,512,30\nd_busy,512,31\nrld_idle,512,30\nrld_busy,512,130\n")
    assert _busy_extra(csv, Steps(), "rld_idle", "rld_busy", optional=True)["extra_ms"] == 96.0
    csv.write_text("state,tokens,transfer_ms\nidle,512,30\nd_busy,512,31\nrld_idle,512,30\n")
    with pytest.raises(UserError, match="rld_busy"):
        _busy_extra(csv, Steps(), "rld_idle", "rld_busy", optional=True)
    csv.write_text("state,tokens,transfer_ms\nidle,512,30\n")
    with pytest.raises(UserError, match="d_busy"):
        _busy_extra(csv, Steps())
    csv.write_text("state,tokens,transfer_ms\nidle,512,fast\nd_busy,512,31\n")
    with pytest.raises(InputError, match=r":2.*transfer_ms"):
        _busy_extra(csv, Steps())


def test_core_share_factor_is_the_relays_slowdown_beside_a_busy_md(tmp_path):
    from pddbench.core.errors import InputError, UserError
    from pddbench.measure.fidelity import _core_share_factor

    class Steps:  # MD's fit: 2 ms + 0.01 ms per KV token -> 2.64 ms at the stream's 64
        def decode_ms(self, batch, kv_tokens, extend_tokens=0):
            return 2.0 + 0.01 * kv_tokens

    csv = tmp_path / "core_share_check.csv"
    csv.write_text("state,tpot_ms\nidle,5.28\nmd_pull,15\nmd_decode,12\nidle,6\nmd_pull,16.4\nmd_decode,900\nidle,4\n")
    # medians: idle 5.28, MD busy (15, 12, 16.4, 900) 15.7; the relay alone is 2x the fit
    assert _core_share_factor(csv, Steps()) == {"idle_tpot_ms": 5.28, "md_busy_tpot_ms": 15.7, "step_factor": 2.973,
                                                "fit_step_ms": 2.64, "relay_step_factor": 2.0}
    csv.write_text("state,tpot_ms\nidle,5\nmd_pull,4\n")
    assert _core_share_factor(csv, Steps())["step_factor"] == 1.0  # never below 1
    csv.write_text("state,tpot_ms\nidle,5\n")
    with pytest.raises(UserError, match="md_pull"):
        _core_share_factor(csv, Steps())
    csv.write_text("state,tpot_ms\nidle,5\nmd_pull,slow\n")
    with pytest.raises(InputError, match=r":3.*tpot_ms"):
        _core_share_factor(csv, Steps())


def test_ttft_parts_and_per_request_rows():
    import io

    import pandas as pd

    from pddbench.measure.fidelity import per_request_csv, phase_table

    live = _records([0, 100, 200], np.array([50.0, 60, 70]), 30.0, 512)
    sim = _records([0, 100, 200], np.array([40.0, 60, 80]), 10.0, 0)
    parts = phase_table(live, sim)
    p50 = {name: next(r for r in rows if r["percentile"] == 50) for name, rows in parts.items()}
    assert p50["prefill_ms"] == {"percentile": 50, "live_ms": 60.0, "sim_ms": 60.0}
    assert p50["kv_and_first_step_ms"]["live_ms"] == 30.0 and p50["kv_and_first_step_ms"]["sim_ms"] == 10.0
    rows = pd.read_csv(io.StringIO(per_request_csv(live, sim)))
    assert list(rows["live_ttft_ms"]) == [80.0, 90.0, 100.0] and list(rows["sim_ttft_ms"]) == [50.0, 70.0, 90.0]
    assert list(rows["sim_prefill_ms"]) == [40.0, 60.0, 80.0]
    assert list(rows["live_cached_tokens"]) == [512] * 3 and list(rows["sim_cached_tokens"]) == [0] * 3
    # a live front that reports no prefill end (a single engine): no parts, no crash
    assert phase_table(live.assign(prefill_end_ms=np.nan), sim) == {}


def test_prefix_hit_and_mostly_new_requests_are_compared_apart():
    from pddbench.measure.fidelity import by_prefix_hit

    # requests 0-1: P held most of the prompt (600 and 500 of 1000 tokens); request 2: 100
    live = _records([0, 100, 200], np.array([10.0, 20, 500]), np.array([40.0, 60, 30]), np.array([600, 500, 100]))
    sim = _records([0, 100, 200], np.array([10.0, 10, 490]), np.array([20.0, 20, 30]), np.array([600, 500, 100]))
    hit, new = by_prefix_hit(live, sim)
    assert (hit["requests"], hit["live_n"], hit["sim_n"], new["live_n"]) == ("prefix_hit", 2, 2, 1)
    assert hit["live_kv_and_first_step_ms_p50"] == 50.0 and hit["sim_kv_and_first_step_ms_p50"] == 20.0
    assert hit["live_ttft_ms_p50"] == 65.0 and hit["sim_prefill_ms_p50"] == 10.0
    assert new["live_ttft_ms_p50"] == 530.0 and new["sim_ttft_ms_p50"] == 520.0
    # no request of a kind: its medians are None, not an error
    assert by_prefix_hit(live.iloc[2:], sim.iloc[2:])[0]["live_ttft_ms_p50"] is None


def test_percentile_intervals_are_paired_and_say_when_the_gap_is_within_the_live_spread():
    from pddbench.measure.fidelity import ci_table

    rng = np.random.default_rng(0)
    live = rng.lognormal(5, 1, 300)
    same = ci_table([(live, live.copy())], n=300)
    assert all(r["error_ms"] == 0 and r["error_pct_ci"] == [0.0, 0.0] and r["within_live_spread"] for r in same)
    for r in same:
        lo, hi = r["live_ci_ms"]
        assert lo <= r["live_ttft_ms"] <= hi and r["live_spread_ms"] == (hi - lo) / 2
    off = ci_table([(live, live * 2)], n=300)
    assert all(not r["within_live_spread"] and 99 < r["error_pct_ci"][0] <= 100 <= r["error_pct_ci"][1] < 101
               for r in off)  # paired: doubling every request doubles every resampled percentile
    near = ci_table([(live, live * 1.01)], n=300)
    assert [r["percentile"] for r in near if not r["within_live_spread"]] == []


def test_repeats_widen_the_interval_by_their_own_spread():
    from pddbench.measure.fidelity import ci_table

    rng = np.random.default_rng(1)
    runs = [rng.lognormal(5, 1, 200) * f for f in (0.7, 1.0, 1.4)]  # runs that disagree with each other
    pooled = np.concatenate(runs)
    one = ci_table([(pooled, pooled)], n=300)
    three = ci_table([(r, r) for r in runs], n=300)
    width = lambda rows: np.mean([r["live_ci_ms"][1] - r["live_ci_ms"][0] for r in rows])  # noqa: E731
    assert width(three) > 1.5 * width(one)


def test_a_repeat_folder_lists_its_repeats(tmp_path):
    import json

    from pddbench.measure.fidelity import live_runs

    assert live_runs(tmp_path) == [tmp_path]
    (tmp_path / "repeats.json").write_text(json.dumps({"runs": ["repeat-0", "repeat-1"]}))
    assert live_runs(tmp_path) == [tmp_path / "repeat-0", tmp_path / "repeat-1"]


CALIB = REPO / "scenarios" / "live" / "engine_calibration.example.csv"


def _transfer_table(fixed_ms: float) -> str:
    """A transfer calibration table: `fixed_ms` + 50 Mbit/s, 2 KB per token."""
    return "tokens,kv_bytes,transfer_ms\n" + "".join(
        f"{n},{n * 2048},{fixed_ms + n * 2048 * 8 / 50e6 * 1e3:.3f}\n" for n in (128, 1024, 4096))


def _live_folder(folder, live="live/same-dc-pd", overrides=(), transfer_ms=None, summary=None):
    """A live run folder's inputs to its twin, no vLLM: the live scenario as the run saves it, the
    example step-time calibration, a P -> D transfer table when `transfer_ms`, summary.json."""
    import json
    import shutil

    import yaml

    from pddbench.schema.scenario import load_scenario

    folder.mkdir(parents=True)
    live_sc = load_scenario(live, ["workload.synth.requests=60", *overrides])
    (folder / "scenario.yaml").write_text(yaml.safe_dump(live_sc.model_dump(mode="json"), sort_keys=False))
    shutil.copy(CALIB, folder / "engine_calibration.csv")
    if transfer_ms is not None:
        (folder / "kv_transfer_calibration.csv").write_text(_transfer_table(transfer_ms))
    if summary is not None:
        (folder / "summary.json").write_text(json.dumps(summary))
    return live_sc


def _fake_live_run(folder, scale, seed_shift=0.0, live="live/same-dc-pd", transfer_ms=None):
    """A live-looking run folder whose records are its twin's own, TTFT scaled by `scale` (no vLLM)."""
    from pddbench.measure.fidelity import build_twin
    from pddbench.metrics.records import write_records
    from pddbench.measure.runner import simulate_summary
    from pddbench.workload.source import workload_requests
    from pddbench.workload.trace import write_trace

    live_sc = _live_folder(folder, live, transfer_ms=transfer_ms)
    reqs = workload_requests(live_sc)
    write_trace(folder / "trace.jsonl", reqs)
    rec, _ = simulate_summary(build_twin(folder).scenario, reqs=reqs)
    rec["ttft_ms"] = rec["ttft_ms"] * scale + seed_shift
    rec["first_token_ms"] = rec["arrival_ms"] + rec["ttft_ms"]
    write_records(folder / "records.parquet", rec)


def test_twin_takes_the_live_runs_own_policy_sla_blocks_and_kv_geometry(tmp_path):
    """A live catch-up PDD run gets a catch-up twin: the twin is built from the run's scenario.yaml
    (and its summary's KV bytes per token), not from a hand-copied policy."""
    from pddbench.measure.fidelity import build_twin
    from pddbench.schema.scenario import load_scenario

    run = tmp_path / "catch-up"
    live_sc = _live_folder(run, "live/pdd-catch-up", ["sla.ttft_ms=1234", "deployment.kv_block_tokens=64",
                                                      "deployment.relay.max_batch_seqs=5", "workload.block_size=256"],
                           transfer_ms=100, summary={"kv_bytes_per_token": 4096})
    twin = build_twin(run)
    sc = twin.scenario
    assert sc.runtime == "sim" and sc.deployment.kind == "pdd"
    assert sc.policy.handoff_mode == "catch_up" and live_sc.policy.handoff_mode == "catch_up"
    assert (sc.policy.catch_up_threshold_tokens, sc.policy.catch_up_batch_tokens) == (16, 8)  # live/pdd.yaml's
    assert sc.policy.singular_min_input_tokens == 4096
    assert not sc.policy.relay_finish_stops_wan_kv  # vLLM cannot stop MD's pull: it drains
    assert sc.sla == live_sc.sla and sc.sla.ttft_ms == 1234
    assert (sc.deployment.kv_block_tokens, sc.deployment.relay.max_batch_seqs, sc.workload.block_size) == (64, 5, 256)
    assert sc.model.kv_bytes_per_token == 4096 and twin.from_live["model.kv_bytes_per_token"] == 4096
    # the simulator-only half stays the twin file's; the measurements are the run's
    cal = sc.twin_calibration
    assert cal.core_groups == {"decoders": ["relay", "main"]} and cal.second_prefill_for_md
    assert sc.latency.calibration_csv == str((run / "engine_calibration.csv").resolve())
    assert sc.network.wan.sharing == "fifo" and twin.link["measured_delay_ms"] == pytest.approx(100)
    # an adaptive run of the same deployment gets an adaptive twin from the same file
    adaptive = tmp_path / "adaptive"
    _live_folder(adaptive, "live/pdd", transfer_ms=100)
    assert build_twin(adaptive).scenario.policy.handoff_mode == "adaptive"
    # a run made before the summary kept the KV bytes per token: the twin file's model states it
    assert "model.kv_bytes_per_token" not in build_twin(adaptive).from_live
    file_kv = load_scenario("live/sim-twin-pdd").model.kv_bytes_per_token
    assert build_twin(adaptive).scenario.model.kv_bytes_per_token == file_kv
    # --twin is an explicit override: taken as it is, with the run's measurements only
    explicit = build_twin(run, REPO / "scenarios" / "live" / "sim-twin-pdd.yaml")
    assert explicit.from_live == {} and explicit.scenario.policy.handoff_mode == "adaptive"
    assert explicit.scenario.latency.calibration_csv == sc.latency.calibration_csv


@pytest.mark.parametrize("value", ['"2048"', "0", "2048.5", "true"])
def test_a_damaged_summary_kv_geometry_is_refused(tmp_path, value):
    from pddbench.core.errors import UserError
    from pddbench.measure.fidelity import build_twin

    run = tmp_path / "run"
    _live_folder(run)
    (run / "summary.json").write_text('{"kv_bytes_per_token": ' + value + "}")
    with pytest.raises(UserError, match="kv_bytes_per_token"):
        build_twin(run)


def test_a_live_run_records_its_served_models_kv_geometry_and_the_twin_takes_it(tmp_path):
    """kv_bytes_per_token, live: derived once from the served model's config.json, written to the
    run's summary, read from there by the twin."""
    import json

    from pddbench.core.errors import InputError
    from pddbench.measure.fidelity import build_twin
    from pddbench.live.live_summary import live_summary
    from pddbench.live.tiny_model import kv_bytes_per_token
    from pddbench.metrics.records import write_records
    from pddbench.measure.runner import simulate_summary
    from pddbench.schema.scenario import load_scenario

    model = tmp_path / "model"
    model.mkdir()
    config = {"num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 256,
              "dtype": "float32"}  # newer transformers write dtype, older torch_dtype
    (model / "config.json").write_text(json.dumps(config))
    assert kv_bytes_per_token(model) == 2 * 4 * 2 * 64 * 4
    (model / "config.json").write_text(json.dumps({**config, "dtype": None, "torch_dtype": "bfloat16"}))
    assert kv_bytes_per_token(model) == 2048  # the tiny model's, as sim-twin-same-dc-pd.yaml states it
    (model / "config.json").write_text(json.dumps({"num_attention_heads": 4}))
    with pytest.raises(InputError, match="num_hidden_layers"):
        kv_bytes_per_token(model)

    run = tmp_path / "run"
    live_sc = _live_folder(run)
    (run / "replay").mkdir()
    rec, _ = simulate_summary(load_scenario("live/sim-twin-same-dc-pd", ["workload.synth.requests=10"]))
    write_records(run / "replay" / "records.parquet", rec)
    (run / "replay" / "summary.json").write_text(json.dumps(
        {"endpoint": "http://127.0.0.1:1", "schedule_lag_p99_ms": 0.0, "schedule_ok": True, "interrupted": False,
             "replay_workers": []}))
    summary = live_summary(live_sc, run, [], {}, None, str(model), 3000)
    assert summary["kv_bytes_per_token"] == 3000
    assert json.loads((run / "summary.json").read_text())["kv_bytes_per_token"] == 3000
    assert build_twin(run).scenario.model.kv_bytes_per_token == 3000


def test_shipped_twin_files_hold_only_what_is_simulator_only():
    """The live contract (policy, SLA, KV block, relay capacity) comes from the live run, so the
    twin files state none of it: nothing there to drift."""
    import yaml

    for path in (REPO / "scenarios" / "live").glob("sim-twin-*.yaml"):
        data = yaml.safe_load(path.read_text())
        assert not {"policy", "sla", "live"} & set(data), path
        deployment = data.get("deployment", {})
        assert "kv_block_tokens" not in deployment and "max_batch_seqs" not in (deployment.get("relay") or {}), path


def test_fidelity_of_a_run_and_of_repeats_writes_intervals_and_the_figure(tmp_path):
    import json

    from pddbench.measure.fidelity import fidelity

    _fake_live_run(tmp_path / "one", 1.25)
    res = fidelity(tmp_path / "one", None, tmp_path / "one" / "fid", n_boot=200)
    assert res["repeats"] == 1 and res["bootstrap"]["over"] == "requests"
    assert res["mix"]["live"] == res["mix"]["sim"] and res["mix"]["live"]["pipelines"] == {"p_d": 60}
    for r in res["ttft"]:
        assert np.isclose(r["error_pct"], -20.0)  # sim = live / 1.25 on every request
        assert r["error_pct_ci"][0] <= r["error_pct"] <= r["error_pct_ci"][1]
    assert (tmp_path / "one" / "fid" / "fidelity_ttft.png").stat().st_size > 10_000
    # the twin as it ran is saved, and runs again as it is
    from pddbench.schema.scenario import load_scenario

    saved = load_scenario(tmp_path / "one" / "fid" / "twin_scenario.yaml")
    assert saved.twin_calibration.kv_pull_at_decode_step and saved.deployment.kv_block_tokens == 128
    assert res["twin_from_live_run"]["deployment.kv_block_tokens"] == 128
    assert "error_pct_ci_lo" in (tmp_path / "one" / "fid" / "fidelity.csv").read_text().splitlines()[0]

    reps = tmp_path / "reps"
    for i, shift in enumerate((0.0, 50.0)):
        _fake_live_run(reps / f"repeat-{i}", 1.0, shift)
    (reps / "repeats.json").write_text(json.dumps({"runs": ["repeat-0", "repeat-1"]}))
    res = fidelity(reps, None, reps / "fid", n_boot=200)
    assert res["repeats"] == 2 and res["bootstrap"]["over"] == "repeats, then requests"
    assert all((reps / "fid" / f"twin_scenario-repeat-{i}.yaml").is_file() for i in (0, 1))
    assert len(res["live_ttft_per_repeat"]) == 2 and res["requests_paired"] == 120


def test_pdd_twin_compares_the_request_mix(tmp_path):
    from pddbench.measure.fidelity import fidelity

    run = tmp_path / "pdd"
    _fake_live_run(run, 1.0, 0.0, "live/pdd", transfer_ms=100)  # P -> MD measured from dc-a: 100 ms + 50 Mbit/s
    res = fidelity(run, None, run / "fid", n_boot=100)
    assert res["twin_scenario"].endswith("sim-twin-pdd.yaml") and res["tpot"]
    link = res["kv_link_fitted"]
    assert abs(link["measured_delay_ms"] - 100) < 1e-6
    # the twin's link keeps the transfer without D's one-token step, which the twin simulates itself
    assert 0 < link["decode_step_subtracted_ms"] < 100
    assert link["delay_ms"] == pytest.approx(100 - link["decode_step_subtracted_ms"], abs=1e-3)
    assert res["engine_fit"]["prefill"]["breaks_tokens"][0] == 0
    for side in ("live", "sim"):
        mix = res["mix"][side]
        assert set(mix["pipelines"]) <= {"p_md", "p_rld_md", "p_rld"} and sum(mix["pipelines"].values()) == 60
        assert 0 < mix["relay_token_share"] < 1 and mix["handoffs"] >= 0


def test_pdd_twin_takes_the_measured_relay_pull(tmp_path):
    """With kv_transfer_relay_calibration.csv (live PDD's P -> RLD pull over NIXL on one host) the
    twin's P -> RLD link is that fit, not the idealised RDMA profile: relay-path requests' first
    tokens come later by about the measured fixed part; P -> MD requests hardly move."""
    import pandas as pd

    from pddbench.measure.fidelity import fidelity
    from pddbench.live.engine_calibration import RELAY_TRANSFER_CSV

    run = tmp_path / "pdd"
    _fake_live_run(run, 1.0, 0.0, "live/pdd", transfer_ms=100)
    before = fidelity(run, None, run / "fid0", n_boot=50)
    assert "relay" not in before["kv_link_fitted"]
    (run / RELAY_TRANSFER_CSV).write_text(_transfer_table(80))
    after = fidelity(run, None, run / "fid1", n_boot=50)
    relay = after["kv_link_fitted"]["relay"]
    assert relay["measured_delay_ms"] == pytest.approx(80, abs=1e-6) and relay["delay_ms"] < 80
    rows0, rows1 = (pd.read_csv(run / f / "fidelity_requests.csv") for f in ("fid0", "fid1"))
    rec = pd.read_parquet(run / "records.parquet")[["request_id", "pipeline"]]
    both = rows0.merge(rows1, on="request_id", suffixes=("_0", "_1")).merge(rec, on="request_id")
    moved = (both["sim_ttft_ms_1"] - both["sim_ttft_ms_0"]).groupby(both["pipeline"]).median()
    assert moved["p_rld_md"] > 0.5 * relay["delay_ms"]
    # P -> MD requests move only through the core MD shares with the relay, busy for longer pulls
    assert abs(moved["p_md"]) < 0.3 * moved["p_rld_md"]
