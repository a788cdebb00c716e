"""`pddbench fidelity LIVE_RUN`: the simulator against a live run on the same requests.

The live run's trace is replayed through the twin scenario with the live arrival times (so both
see one arrival process) and the step times calibrated from the live engines
(`engine_calibration.csv` in the live run). Output: TTFT per percentile, live vs sim, and the
error (sim - live, ms and %), as JSON, CSV and a figure; when the live front reported when P
answered (`prefill_end_ms`), TTFT's two parts per percentile too: arrival -> prefill end (P's queue
and prefill) and prefill end -> first token (KV transfer and D's first step)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from pddbench.errors import UserError
from pddbench.io import run_folder, save_figure, write_json, write_text
from pddbench.shipped import SCENARIOS

PERCENTILES = (10, 25, 50, 75, 90, 95, 99)


def live_arrival_requests(live_dir: Path, block_size: int):
    """The live run's requests with their live send times as timestamps."""
    from pddbench.workload.trace import load_trace

    from pddbench.compare import load_records

    records = load_records(live_dir)
    trace = load_trace(live_dir / "trace.jsonl", block_size=block_size)
    _records_match(records, trace, live_dir)
    arrival = dict(zip(records["request_id"], records["arrival_ms"]))
    reqs = [dataclasses.replace(r, timestamp_ms=int(round(arrival[i]))) for i, r in enumerate(trace) if i in arrival]
    if not reqs:
        raise UserError(f"{live_dir}: no request of trace.jsonl has a record")
    return sorted(reqs, key=lambda r: r.timestamp_ms), records


def _records_match(records, trace, live_dir: Path) -> None:
    """Every record is a request of the trace, with its prompt length and a finite arrival."""
    for rid, tokens, arrival in zip(records["request_id"], records["input_tokens"], records["arrival_ms"]):
        if not 0 <= rid < len(trace):
            raise UserError(f"{live_dir}/records.parquet: request {rid} is not in trace.jsonl ({len(trace)} requests): "
                            "records and trace are from different runs")
        if tokens != trace[rid].input_length or not np.isfinite(arrival):
            raise UserError(f"{live_dir}/records.parquet: request {rid} has input_tokens {tokens} and arrival "
                            f"{arrival}, trace.jsonl line {rid + 1} has input_length {trace[rid].input_length}: "
                            "records and trace do not match")


def ttft_table(live_ttft: np.ndarray, sim_ttft: np.ndarray) -> list[dict]:
    rows = []
    for q in PERCENTILES:
        lv, sv = float(np.percentile(live_ttft, q)), float(np.percentile(sim_ttft, q))
        rows.append({"percentile": q, "live_ttft_ms": lv, "sim_ttft_ms": sv, "error_ms": sv - lv,
                     "error_pct": 100 * (sv - lv) / lv if lv else float("nan")})
    return rows


TTFT_PARTS = {"prefill_ms": lambda r: r["prefill_end_ms"] - r["arrival_ms"],
              "kv_and_first_step_ms": lambda r: r["first_token_ms"] - r["prefill_end_ms"]}


def phase_table(live, sim) -> dict[str, list[dict]]:
    """TTFT's parts per percentile, live vs sim; empty when the live run has no prefill_end_ms."""
    out = {}
    for name, part in TTFT_PARTS.items():
        lv, sv = part(live).dropna().to_numpy(), part(sim).dropna().to_numpy()
        if len(lv) and len(sv):
            out[name] = [{"percentile": q, "live_ms": float(np.percentile(lv, q)), "sim_ms": float(np.percentile(sv, q))}
                         for q in PERCENTILES]
    return out


def per_request_csv(live, sim) -> str:
    """One row per request on both sides, to find which requests the twin gets wrong."""
    import pandas as pd

    both = live.merge(sim, on="request_id", suffixes=("_live", "_sim"))
    out = pd.DataFrame({"request_id": both["request_id"], "input_tokens": both["input_tokens_live"],
                        "live_cached_tokens": both["p_cached_tokens_live"],
                        "sim_cached_tokens": both["p_cached_tokens_sim"]})
    sides = {side: both.rename(columns=lambda c, s=side: c.removesuffix(f"_{s}")) for side in ("live", "sim")}
    for name, part in {"ttft_ms": lambda r: r["ttft_ms"], **TTFT_PARTS}.items():
        for side, frame in sides.items():
            out[f"{side}_{name}"] = part(frame)
    return out.to_csv(index=False, float_format="%.3f")


def _refuse_interrupted(live_dir: Path) -> None:
    from pddbench.loading import read_json

    summary = read_json(live_dir / "summary.json", "summary file") if (live_dir / "summary.json").is_file() else {}
    if isinstance(summary, dict) and summary.get("interrupted"):
        raise UserError(f"{live_dir} was interrupted (Ctrl-C): its arrivals stop early and its last requests "
                        "were cut off; compare a complete live run")


TWINS = {"same_dc_pd": "sim-twin-same-dc-pd.yaml", "cross_dc_pd": "sim-twin-cross-dc-pd.yaml"}
LINK_OF = {"same_dc_pd": "network.rdma", "cross_dc_pd": "network.wan"}  # the link P -> D crosses


def default_twin(kind: str) -> Path:
    if kind not in TWINS:
        raise UserError(f"no shipped twin for a live {kind} run (there are twins of {', '.join(TWINS)}): "
                        "pass --twin with a simulated scenario of the same deployment")
    return SCENARIOS / "live" / TWINS[kind]


def fidelity(live_dir: Path, twin: Path | None, out: Path) -> dict:
    """Compare; `out` must be new or empty (made here once the comparison is possible). Without
    `twin`, the shipped twin of the live run's deployment."""
    from pddbench.io import check_out_place
    from pddbench.runner import simulate_summary
    from pddbench.scenario import load_scenario

    check_out_place(out)
    for name in ("records.parquet", "trace.jsonl", "scenario.yaml"):
        if not (live_dir / name).is_file():
            raise UserError(f"{live_dir} is not a live run folder: it has no {name}")
    calib = live_dir / "engine_calibration.csv"
    if not calib.is_file():
        raise UserError(f"{live_dir} has no engine_calibration.csv: run the live scenario with "
                        "`--set live.calibrate_engine=true` (scenarios/live/same-dc-pd.yaml and cross-dc-pd.yaml set it)")
    live_sc = load_scenario(live_dir / "scenario.yaml")
    if live_sc.runtime != "live" or live_sc.deployment is None:
        raise UserError(f"{live_dir} is not a live run: its scenario.yaml is not a live deployment")
    _refuse_interrupted(live_dir)
    live_kind = live_sc.deployment.kind
    twin = twin or default_twin(live_kind)
    reqs, live = live_arrival_requests(live_dir, live_sc.workload.block_size)
    overrides = [f"latency.calibration_csv={calib.resolve()}"]
    link = None
    xfer = live_dir / "kv_transfer_calibration.csv"
    if xfer.is_file() and live_kind in LINK_OF:
        # The measured P -> D transfer (from the client's side: across the WAN it includes the
        # request to D and the token back) replaces the twin's link: the idealised RDMA one, or
        # the WAN profile, whose one crossing per transfer misses NIXL's round trips. NIXL over
        # UCX TCP moves a P-D pair's reads over one connection, one after another: fifo.
        from pddbench.live.engine_calibration import fit_link
        from pddbench.loading import read_number_table

        link = fit_link(read_number_table(xfer, "transfer calibration table"))
        rate = "null" if link["rate_gbps"] is None else link["rate_gbps"]
        overrides.append(f"{LINK_OF[live_kind]}={{delay_ms: {link['delay_ms']}, rate_gbps: {rate}, sharing: fifo}}")
    elif live_kind == "cross_dc_pd":
        raise UserError(f"{live_dir} has no kv_transfer_calibration.csv: a cross-DC twin needs the measured "
                        "P -> D transfer; run the live scenario with `--set live.calibrate_engine=true`")
    sc = load_scenario(twin, overrides)
    if sc.deployment is None or sc.deployment.kind != live_kind:
        twin_kind = sc.deployment.kind if sc.deployment else "none"
        raise UserError(f"{live_dir} is a live {live_kind} run but the twin {twin} simulates {twin_kind}: "
                        "pass --twin with a simulated scenario of the same deployment")
    sim, _ = simulate_summary(sc, reqs=reqs)
    live_ok, sim_ok = live[~live["failed"]], sim[~sim["failed"]]
    if live_ok.empty or sim_ok.empty:
        raise UserError("no completed request on one side: nothing to compare")
    rows = ttft_table(live_ok["ttft_ms"].to_numpy(), sim_ok["ttft_ms"].to_numpy())
    result = {"live_run": str(live_dir), "twin_scenario": str(twin), "requests_live": int(len(live_ok)),
              "requests_sim": int(len(sim_ok)), "kv_link_fitted": link, "ttft": rows,
              "max_abs_error_pct": max(abs(r["error_pct"]) for r in rows), "ttft_parts": phase_table(live_ok, sim_ok),
              "tpot_ms": {"live_p50": float(live_ok["tpot_ms"].median()), "sim_p50": float(sim_ok["tpot_ms"].median())}}
    with run_folder(out, out, "") as folder:  # only now: a refused comparison leaves no folder behind
        _write(folder.path, result, rows, live_ok, sim_ok)
    return result


def _write(out: Path, result: dict, rows: list[dict], live_ok, sim_ok) -> None:
    write_json(out / "fidelity.json", result)
    write_text(out / "fidelity.csv", "percentile,live_ttft_ms,sim_ttft_ms,error_ms,error_pct\n" + "".join(
        f"{r['percentile']},{r['live_ttft_ms']:.3f},{r['sim_ttft_ms']:.3f},{r['error_ms']:.3f},{r['error_pct']:.2f}\n"
        for r in rows))
    write_text(out / "fidelity_requests.csv", per_request_csv(live_ok, sim_ok))
    _plot(live_ok["ttft_ms"].to_numpy(), sim_ok["ttft_ms"].to_numpy(), rows, out / "fidelity_ttft.png")


def _plot(live: np.ndarray, sim: np.ndarray, rows: list[dict], path: Path) -> None:
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for data, label in ((live, "live (vLLM)"), (sim, "simulator (calibrated)")):
        x = np.sort(data)
        ax1.plot(x, np.arange(1, len(x) + 1) / len(x), label=label)
    ax1.set_xscale("log")
    ax1.set_xlabel("TTFT (ms, log)")
    ax1.set_ylabel("CDF")
    ax1.legend()
    ax2.bar([f"p{r['percentile']}" for r in rows], [r["error_pct"] for r in rows])
    ax2.axhline(0, color="black", linewidth=0.8)
    ax2.set_ylabel("sim - live (% of live TTFT)")
    ax2.set_title("TTFT error per percentile")
    save_figure(fig, path)
