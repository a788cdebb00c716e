"""`pddbench fidelity LIVE_RUN`: the simulator against a live run on the same requests.

The live run's trace is replayed through its twin with the live arrival times (so both see one
arrival process). The twin is built per run (build_twin): the simulator-only twin file of the
deployment (scenarios/live/sim-twin-*.yaml: model geometry, pools, how vLLM CPU is modelled), the
live run's own scenario.yaml (policy, SLA, KV block, relay capacity) and summary (the served
model's KV bytes per token), and what the run measured: step times (`engine_calibration.csv`),
transfers and busy checks (`twin_calibration`). It is saved beside the report (twin_scenario.yaml).

Output: TTFT per percentile, live vs sim, and the error (sim - live, ms and %), as JSON, CSV and a
figure; when the live front reported when P answered (`prefill_end_ms`), TTFT's two parts per
percentile too: arrival -> prefill end (P's queue and prefill) and prefill end -> first token (KV
transfer and D's first step).

Each percentile carries a confidence interval (default 95%) for live, sim and the error, from a
paired bootstrap: the same requests are drawn on both sides (they are the same requests). One run:
requests drawn with replacement. A repeat folder (`pddbench run --repeat N`: repeats.json and
repeat-0..N-1, each compared with its own twin run on its own arrivals and calibration): repeats
drawn with replacement, then each drawn repeat's requests (two levels, as the gate's statistical
mode), so run-to-run spread enters the interval. `within_live_spread` says when the gap
(|sim - live|) is no larger than the half-width of the live percentile's own interval: there the
live run cannot tell the twin wrong."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import yaml

from pddbench.core.errors import UserError
from pddbench.core.io import run_folder, save_figure, write_json, write_text
from pddbench.core.shipped import SCENARIOS

PERCENTILES = (10, 25, 50, 75, 90, 95, 99)


def live_arrival_requests(live_dir: Path, block_size: int):
    """The live run's requests with their live send times as timestamps."""
    from pddbench.workload.trace import load_trace

    from pddbench.measure.compare import load_records

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


def by_prefix_hit(live, sim) -> list[dict]:
    """TTFT and its parts at the median, live vs sim, for requests whose prompt P mostly found in
    its prefix cache (a later turn: few new tokens, a large context) and for the rest. The two
    kinds take different paths through the engines (a one-block pull into a decoder holding a long
    context, or a whole prompt's KV), so the twin can be right for one and wrong for the other."""
    rows = []
    for kind, pick in (("prefix_hit", lambda f: f["p_cached_tokens"] * 2 >= f["input_tokens"]),
                       ("mostly_new", lambda f: f["p_cached_tokens"] * 2 < f["input_tokens"])):
        lv, sv = live[pick(live)], sim[pick(sim)]
        row = {"requests": kind, "live_n": int(len(lv)), "sim_n": int(len(sv))}
        for name, part in {"ttft_ms": lambda r: r["ttft_ms"], **TTFT_PARTS}.items():
            lp, sp = part(lv).dropna(), part(sv).dropna()
            row[f"live_{name}_p50"] = float(lp.median()) if len(lp) else None
            row[f"sim_{name}_p50"] = float(sp.median()) if len(sp) else None
        rows.append(row)
    return rows


def per_request_csv(live, sim) -> str:
    """One row per request on both sides, to find which requests the twin gets wrong."""
    import pandas as pd

    keys = ["repeat", "request_id"] if "repeat" in live.columns and "repeat" in sim.columns else ["request_id"]
    both = live.merge(sim, on=keys, suffixes=("_live", "_sim"))
    out = pd.DataFrame({**{k: both[k] for k in keys}, "input_tokens": both["input_tokens_live"],
                        "live_cached_tokens": both["p_cached_tokens_live"],
                        "sim_cached_tokens": both["p_cached_tokens_sim"]})
    sides = {side: both.rename(columns=lambda c, s=side: c.removesuffix(f"_{s}")) for side in ("live", "sim")}
    for name, part in {"ttft_ms": lambda r: r["ttft_ms"], **TTFT_PARTS}.items():
        for side, frame in sides.items():
            out[f"{side}_{name}"] = part(frame)
    return out.to_csv(index=False, float_format="%.3f")


def _live_summary(live_dir: Path) -> dict:
    """The live run's summary.json, or {} where it has none (a run folder made by hand)."""
    from pddbench.core.loading import read_json

    summary = read_json(live_dir / "summary.json", "summary file") if (live_dir / "summary.json").is_file() else {}
    return summary if isinstance(summary, dict) else {}


def _refuse_interrupted(live_dir: Path) -> None:
    if _live_summary(live_dir).get("interrupted"):
        raise UserError(f"{live_dir} was interrupted (Ctrl-C): its arrivals stop early and its last requests "
                        "were cut off; compare a complete live run")


def recorded_kv_bytes_per_token(live_dir: Path) -> int | None:
    """The served model's KV bytes per token, as the live run recorded it in its summary; None for
    a run made before the summary kept it."""
    value = _live_summary(live_dir).get("kv_bytes_per_token")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError(f"{live_dir}/summary.json: kv_bytes_per_token is {value!r}, not a positive whole number of "
                        "bytes: the summary is damaged")
    return value


TWINS = {"same_dc_pd": "sim-twin-same-dc-pd.yaml", "cross_dc_pd": "sim-twin-cross-dc-pd.yaml",
         "pdd": "sim-twin-pdd.yaml"}
LINK_OF = {"same_dc_pd": "network.rdma", "cross_dc_pd": "network.wan", "pdd": "network.wan"}  # P -> D (pdd: -> MD)
NEEDS_TRANSFER = ("cross_dc_pd", "pdd")  # twins whose WAN must be the measured transfer


def request_mix(frame) -> dict:
    """What the PDD policy did with the requests: relay token share, pipelines, handoff modes and
    handoffs (requests MD took over from the relay), transfers aborted."""
    out_tokens = float(frame["output_tokens"].sum())
    handoffs = frame["handoff_mode"].isin(["one_shot", "catch_up"])
    return {"relay_token_share": float(frame["relay_tokens"].sum()) / out_tokens if out_tokens else 0.0,
            "pipelines": {str(k): int(v) for k, v in frame["pipeline"].value_counts().sort_index().items()},
            "handoff_modes": {str(k): int(v) for k, v in frame["handoff_mode"].value_counts().sort_index().items()},
            "handoffs": int(handoffs.sum()), "transfers_aborted": int(frame["transfer_aborted"].sum())}


def default_twin(kind: str) -> Path:
    if kind not in TWINS:
        raise UserError(f"no shipped twin for a live {kind} run (there are twins of {', '.join(TWINS)}): "
                        "pass --twin with a simulated scenario of the same deployment")
    return SCENARIOS / "live" / TWINS[kind]


def live_runs(live_dir: Path) -> list[Path]:
    """The run folders to compare: the folder itself, or each repeat of a repeat folder."""
    meta_path = live_dir / "repeats.json"
    if not meta_path.is_file():
        return [live_dir]
    import json

    runs = [live_dir / r for r in json.loads(meta_path.read_text()).get("runs", [])]
    if not runs:
        raise UserError(f"{live_dir}/repeats.json lists no finished repeat")
    return runs


def _fitted_link(path: Path, engine) -> dict:
    """A measured transfer table fitted to a link (fixed part + rate). Each measured transfer ends
    with the receiver's one-token step (it computes the prompt's last token and answers), which the
    twin adds itself after the link: the link keeps the rest."""
    from pddbench.live.engine_calibration import fit_link
    from pddbench.core.loading import read_number_table

    rows = read_number_table(path, "transfer calibration table")
    link = fit_link(rows)
    step = engine.decode_ms(1, min(r["tokens"] for r in rows))
    return {**link, "measured_delay_ms": link["delay_ms"], "decode_step_subtracted_ms": round(step, 3),
            "delay_ms": round(max(0.0, link["delay_ms"] - step), 3)}


def _busy_extra(path: Path, engine, idle: str = "idle", busy: str = "d_busy", optional: bool = False) -> dict | None:
    """How much later a pull lands in a decoder that is decoding, from the run's busy check: the
    median `busy` pull minus the median `idle` one ("d_busy"/"idle": D or MD; "rld_busy"/
    "rld_idle": PDD's relay), less what the twin models itself there (the busy decoder's larger
    first step, and half a step of waiting for the pull to start). `optional`: None when the
    check has neither state (runs made before the relay rows existed)."""
    from pddbench.live.engine_calibration import BUSY_DECODE_STREAMS, BUSY_TRANSFER_TOKENS
    from pddbench.core.loading import read_number_table

    rows = read_number_table(path, "busy transfer check", label="state")
    by_state = {st: float(np.median([r["transfer_ms"] for r in rows if r["state"] == st])) for st in (idle, busy)
                if any(r["state"] == st for r in rows)}
    if optional and not by_state:
        return None
    if len(by_state) < 2:
        raise UserError(f"{path}: needs '{idle}' and '{busy}' rows (the live calibration writes both)")
    kv = BUSY_TRANSFER_TOKENS + BUSY_DECODE_STREAMS * 64
    modelled = (engine.decode_ms(BUSY_DECODE_STREAMS + 1, kv) - engine.decode_ms(1, BUSY_TRANSFER_TOKENS)
                + engine.decode_ms(BUSY_DECODE_STREAMS, kv) / 2)
    measured = by_state[busy] - by_state[idle]
    return {"idle_ms": round(by_state[idle], 3), "busy_ms": round(by_state[busy], 3),
            "modelled_ms": round(modelled, 3), "extra_ms": round(max(0.0, measured - modelled), 3)}


def _core_share_factor(path: Path, engine) -> dict:
    """From the run's core share check: how many times longer PDD's relay steps took while MD,
    on its core, pulled KV or decoded (median of those rows / median idle row, at least 1), and
    the relay's own pace alone against the step-time fit (made on MD): the idle rows' median over
    the fit's one-sequence step at the stream's context."""
    from pddbench.live.engine_calibration import CORE_SHARE_CONTEXT_TOKENS
    from pddbench.core.loading import read_number_table

    rows = read_number_table(path, "core share check", label="state")
    idle = [r["tpot_ms"] for r in rows if r["state"] == "idle"]
    busy = [r["tpot_ms"] for r in rows if r["state"] in ("md_pull", "md_decode")]
    if not idle or not busy:
        raise UserError(f"{path}: needs 'idle' and 'md_pull' or 'md_decode' rows (the live calibration writes them)")
    idle_ms, busy_ms = float(np.median(idle)), float(np.median(busy))
    fit_ms = engine.decode_ms(1, CORE_SHARE_CONTEXT_TOKENS)
    return {"idle_tpot_ms": round(idle_ms, 3), "md_busy_tpot_ms": round(busy_ms, 3),
            "step_factor": round(max(1.0, busy_ms / idle_ms), 3), "fit_step_ms": round(fit_ms, 3),
            "relay_step_factor": round(idle_ms / fit_ms, 3)}


def _fitted_link_setting(link: dict) -> dict:
    """A link profile that is the fitted transfer, served one transfer at a time as NIXL's one UCX
    connection per engine pair does."""
    return {"delay_ms": link["delay_ms"], "rate_gbps": link["rate_gbps"], "sharing": "fifo"}


def live_contract(live_dir: Path, live_sc) -> dict:
    """What the twin takes from the live run itself, by dotted field: what both runtimes read from
    the live run's scenario.yaml (the router's policy, the SLA its relay budget is a share of, the
    engines' KV block, the prefix-cache block, the relay's capacity) and the served model's KV
    bytes per token, as the run recorded it. Taken whole, so no hand-copied twin can drift."""
    d = live_sc.deployment
    # vLLM 0.32's NixlConnector cannot stop a read in flight: whatever the router's policy asks, a
    # pull that a finished relay no longer needs drains into MD (the cancelled request's blocks are
    # freed when their reads complete), so the twin lets it drain
    policy = {**live_sc.policy.model_dump(mode="json"), "relay_finish_stops_wan_kv": False}
    out = {"sla": live_sc.sla.model_dump(mode="json"), "policy": policy,
           "workload.block_size": live_sc.workload.block_size, "deployment.kv_block_tokens": d.kv_block_tokens}
    if d.kind == "pdd":
        out["deployment.relay.max_batch_seqs"] = d.relay_slots()
    kv = recorded_kv_bytes_per_token(live_dir)
    if kv is not None:  # else (older runs) the twin file's model states it
        out["model.kv_bytes_per_token"] = kv
    return out


def _measured(live_dir: Path, live_kind: str, engine) -> tuple[dict, dict | None]:
    """What the run's calibration files say, as twin settings by dotted field, and the fitted
    links and checks for the report (None without a transfer table)."""
    from pddbench.live.engine_calibration import BUSY_CHECK_CSV, CORE_SHARE_CSV, RELAY_TRANSFER_CSV

    settings: dict = {"latency.calibration_csv": str((live_dir / "engine_calibration.csv").resolve())}
    xfer = live_dir / "kv_transfer_calibration.csv"
    if not (xfer.is_file() and live_kind in LINK_OF):
        if live_kind in NEEDS_TRANSFER:
            raise UserError(f"{live_dir} has no kv_transfer_calibration.csv: a cross-DC twin needs the measured "
                            "P -> D transfer; run the live scenario with `--set live.calibrate_engine=true`")
        return settings, None
    # The measured P -> D transfer (from the client's side: across the WAN it includes the request
    # to D and the token back) replaces the twin's link: the idealised RDMA one, or the WAN
    # profile, whose one crossing per transfer misses NIXL's round trips. NIXL over UCX TCP moves
    # a P-D pair's reads over one connection, one after another: fifo.
    link = _fitted_link(xfer, engine)
    settings[LINK_OF[live_kind]] = _fitted_link_setting(link)
    relay = live_dir / RELAY_TRANSFER_CSV
    if live_kind == "pdd" and relay.is_file():
        # PDD's local P -> RLD pull, measured the same way (NIXL over UCX TCP on one host, the
        # relay sharing its core with MD), replaces the idealised RDMA link
        link["relay"] = _fitted_link(relay, engine)
        settings["network.rdma"] = _fitted_link_setting(link["relay"])
    busy = live_dir / BUSY_CHECK_CSV
    if busy.is_file():
        # a pull into a decoding D / MD takes longer than the idle calibration says
        link["busy"] = _busy_extra(busy, engine)
        settings["twin_calibration.kv_pull_busy_extra_ms"] = link["busy"]["extra_ms"]
        relay_busy = _busy_extra(busy, engine, "rld_idle", "rld_busy", optional=True) if live_kind == "pdd" else None
        if relay_busy is not None:  # the same for a pull into PDD's relay
            link["relay_busy"] = relay_busy
            settings["twin_calibration.kv_pull_relay_busy_extra_ms"] = relay_busy["extra_ms"]
    share = live_dir / CORE_SHARE_CSV
    if live_kind == "pdd" and share.is_file():
        # what RLD's steps take while MD, on the same core, pulls KV or decodes
        link["core_share"] = _core_share_factor(share, engine)
        settings["twin_calibration.core_shared_step_factor"] = link["core_share"]["step_factor"]
        settings["twin_calibration.relay_step_factor"] = link["core_share"]["relay_step_factor"]
    return settings, link


@dataclasses.dataclass
class Twin:
    """The simulated twin of one live run."""
    scenario: object       # the Scenario the simulator runs
    live_scenario: object  # the live run's own (its scenario.yaml)
    base: Path             # the simulator-only twin file (the shipped one, or --twin)
    from_live: dict        # what it took from the live run, by dotted field (empty with --twin)
    link: dict | None      # the measured transfers and checks, as fitted (fidelity.json's kv_link_fitted)
    engine: object         # the fitted step-time model


def _put(data: dict, dotted: str, value) -> None:
    *parents, last = dotted.split(".")
    for part in parents:
        node = data.get(part)
        data[part] = node = node if isinstance(node, dict) else {}
        data = node
    data[last] = value


def build_twin(live_dir: Path, twin: Path | None = None) -> Twin:
    """The twin of the live run in `live_dir`: the simulator-only twin file of its deployment (or
    `twin`, an explicit override taken as it is), the live run's own contract (live_contract; not
    with `twin`) and what the run measured (step times, transfers, checks) on top."""
    from pydantic import ValidationError

    from pddbench.schema.scenario import Scenario, load_scenario
    from pddbench.sim.latency import Calibrated

    if not (live_dir / "scenario.yaml").is_file():
        raise UserError(f"{live_dir} is not a live run folder: it has no scenario.yaml")
    live_sc = load_scenario(live_dir / "scenario.yaml")
    if live_sc.runtime != "live" or live_sc.deployment is None:
        raise UserError(f"{live_dir} is not a live run: its scenario.yaml is not a live deployment")
    calib = live_dir / "engine_calibration.csv"
    if not calib.is_file():
        raise UserError(f"{live_dir} has no engine_calibration.csv: run the live scenario with "
                        "`--set live.calibrate_engine=true` (scenarios/live/same-dc-pd.yaml, cross-dc-pd.yaml and "
                        "pdd.yaml set it)")
    live_kind = live_sc.deployment.kind
    base = twin or default_twin(live_kind)
    engine = Calibrated.fit_csv(calib)  # what the twin's latency model will be, for the report
    measured, link = _measured(live_dir, live_kind, engine)
    from_live = {} if twin is not None else live_contract(live_dir, live_sc)
    data = load_scenario(base).model_dump(mode="json")
    for dotted, value in {**from_live, **measured}.items():
        _put(data, dotted, value)
    try:
        sc = Scenario.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "the scenario"
        raise UserError(f"the twin of {live_dir} ({base} with the run's settings) is not valid: {where}: "
                        f"{err['msg']}") from None
    if sc.deployment is None or sc.deployment.kind != live_kind:
        twin_kind = sc.deployment.kind if sc.deployment else "none"
        raise UserError(f"{live_dir} is a live {live_kind} run but the twin {base} simulates {twin_kind}: "
                        "pass --twin with a simulated scenario of the same deployment")
    return Twin(sc, live_sc, base, from_live, link, engine)


def compare_run(live_dir: Path, twin: Path | None) -> tuple:
    """One live run and its twin on the same requests: (live records, sim records, the Twin),
    completed requests only."""
    from pddbench.measure.runner import simulate_summary

    for name in ("records.parquet", "trace.jsonl", "scenario.yaml"):
        if not (live_dir / name).is_file():
            raise UserError(f"{live_dir} is not a live run folder: it has no {name}")
    _refuse_interrupted(live_dir)
    made = build_twin(live_dir, twin)
    reqs, live = live_arrival_requests(live_dir, made.live_scenario.workload.block_size)
    sim, _ = simulate_summary(made.scenario, reqs=reqs)
    return live[~live["failed"]], sim[~sim["failed"]], made


def paired_values(live, sim, field: str) -> tuple[np.ndarray, np.ndarray]:
    """`field` of the requests completed on both sides, aligned by request (NaN pairs dropped)."""
    both = live[["request_id", field]].merge(sim[["request_id", field]], on="request_id", suffixes=("_live", "_sim"))
    lv, sv = both[f"{field}_live"].to_numpy(dtype=float), both[f"{field}_sim"].to_numpy(dtype=float)
    keep = ~(np.isnan(lv) | np.isnan(sv))
    return lv[keep], sv[keep]


def bootstrap_percentiles(groups: list[tuple[np.ndarray, np.ndarray]], qs, n: int = 1000,
                          seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Live and sim percentiles `qs` over `n` paired resamples, each (n, len(qs)). One group:
    requests drawn with replacement; several (repeats): repeats drawn, then requests within each."""
    rng = np.random.default_rng(seed)
    groups = [g for g in groups if len(g[0])]
    k = len(groups)
    live_b, sim_b = np.empty((n, len(qs))), np.empty((n, len(qs)))
    for b in range(n):
        picks = rng.integers(0, k, k) if k > 1 else [0]
        idx = [rng.integers(0, len(groups[i][0]), len(groups[i][0])) for i in picks]
        lv = np.concatenate([groups[i][0][j] for i, j in zip(picks, idx)])
        sv = np.concatenate([groups[i][1][j] for i, j in zip(picks, idx)])
        live_b[b], sim_b[b] = np.percentile(lv, qs), np.percentile(sv, qs)
    return live_b, sim_b


def ci_table(groups: list[tuple[np.ndarray, np.ndarray]], qs=PERCENTILES, confidence: float = 0.95,
             n: int = 1000, seed: int = 0) -> list[dict]:
    """Per percentile: live and sim (pooled over groups), the error, each with its bootstrap
    interval; the live interval's half-width (`live_spread_ms`) and whether the gap is within it."""
    lv = np.concatenate([g[0] for g in groups])
    sv = np.concatenate([g[1] for g in groups])
    live_b, sim_b = bootstrap_percentiles(groups, qs, n, seed)
    a = (1 - confidence) / 2
    with np.errstate(divide="ignore", invalid="ignore"):
        err_pct_b = 100 * (sim_b - live_b) / live_b
    rows = []
    for c, q in enumerate(qs):
        lpt, spt = float(np.percentile(lv, q)), float(np.percentile(sv, q))
        llo, lhi = (float(x) for x in np.quantile(live_b[:, c], [a, 1 - a]))
        slo, shi = (float(x) for x in np.quantile(sim_b[:, c], [a, 1 - a]))
        elo, ehi = (float(x) for x in np.nanquantile(err_pct_b[:, c], [a, 1 - a]))
        spread = (lhi - llo) / 2
        rows.append({"percentile": q, "live_ttft_ms": lpt, "sim_ttft_ms": spt, "error_ms": spt - lpt,
                     "error_pct": 100 * (spt - lpt) / lpt if lpt else float("nan"),
                     "live_ci_ms": [llo, lhi], "sim_ci_ms": [slo, shi], "error_pct_ci": [elo, ehi],
                     "live_spread_ms": spread, "within_live_spread": abs(spt - lpt) <= spread})
    return rows


def fidelity(live_dir: Path, twin: Path | None, out: Path, confidence: float = 0.95, n_boot: int = 1000) -> dict:
    """Compare; `out` must be new or empty (made here once the comparison is possible). Without
    `twin`, the shipped twin of the live run's deployment. `live_dir` is a run folder or a
    repeat folder (each repeat compared with its own twin run)."""
    import pandas as pd

    from pddbench.core.io import check_out_place

    check_out_place(out)
    runs = live_runs(live_dir)
    compared = [compare_run(r, twin) for r in runs]
    if any(c[0].empty or c[1].empty for c in compared):
        raise UserError("no completed request on one side: nothing to compare")
    live_ok = pd.concat([c[0].assign(repeat=i) for i, c in enumerate(compared)], ignore_index=True)
    sim_ok = pd.concat([c[1].assign(repeat=i) for i, c in enumerate(compared)], ignore_index=True)
    ttft_groups = [paired_values(c[0], c[1], "ttft_ms") for c in compared]
    tpot_groups = [paired_values(c[0], c[1], "tpot_ms") for c in compared]
    rows = ci_table(ttft_groups, confidence=confidence, n=n_boot)
    tpot_rows = ci_table(tpot_groups, confidence=confidence, n=n_boot) if all(len(g[0]) for g in tpot_groups) else []
    twins = [c[2] for c in compared]
    per_run = (lambda values: values[0]) if len(runs) == 1 else (lambda values: values)  # noqa: E731
    result = {"live_run": str(live_dir), "twin_scenario": str(twins[0].base), "repeats": len(runs),
              "twin_from_live_run": per_run([t.from_live for t in twins]),
              "requests_live": int(len(live_ok)), "requests_sim": int(len(sim_ok)),
              "requests_paired": int(sum(len(g[0]) for g in ttft_groups)),
              "kv_link_fitted": per_run([t.link for t in twins]),
              "engine_fit": per_run([t.engine.describe() for t in twins]),
              "confidence": confidence, "bootstrap": {"resamples": n_boot, "over": "repeats, then requests"
                                                     if len(runs) > 1 else "requests", "paired": True},
              "ttft": rows, "max_abs_error_pct": max(abs(r["error_pct"]) for r in rows),
              "gaps_beyond_live_spread": [r["percentile"] for r in rows if not r["within_live_spread"]],
              "ttft_parts": phase_table(live_ok, sim_ok), "by_prefix_hit": by_prefix_hit(live_ok, sim_ok),
              "tpot": tpot_rows,
              "tpot_ms": {"live_p50": float(live_ok["tpot_ms"].median()), "sim_p50": float(sim_ok["tpot_ms"].median())},
              "mix": {"live": request_mix(live_ok), "sim": request_mix(sim_ok)}}
    if len(runs) > 1:
        result["live_ttft_per_repeat"] = [{f"p{q}": float(np.percentile(g[0], q)) for q in PERCENTILES}
                                          for g in ttft_groups]
    with run_folder(out, out, "") as folder:  # only now: a refused comparison leaves no folder behind
        _write(folder.path, result, rows, live_ok, sim_ok, ttft_groups, (confidence, n_boot, live_dir, len(runs)))
        for i, t in enumerate(twins):  # each twin as it ran, to rerun with `pddbench run`
            name = "twin_scenario.yaml" if len(runs) == 1 else f"twin_scenario-{runs[i].name}.yaml"
            write_text(folder.path / name, yaml.safe_dump(t.scenario.model_dump(mode="json"), sort_keys=False))
    return result


def _write(out: Path, result: dict, rows: list[dict], live_ok, sim_ok, ttft_groups, how: tuple) -> None:
    confidence, n_boot, live_dir, n_runs = how
    write_json(out / "fidelity.json", result)
    write_text(out / "fidelity.csv", "percentile,live_ttft_ms,sim_ttft_ms,error_ms,error_pct,live_ci_lo_ms,live_ci_hi_ms,"
               "sim_ci_lo_ms,sim_ci_hi_ms,error_pct_ci_lo,error_pct_ci_hi,within_live_spread\n" + "".join(
                   f"{r['percentile']},{r['live_ttft_ms']:.3f},{r['sim_ttft_ms']:.3f},{r['error_ms']:.3f},"
                   f"{r['error_pct']:.2f},{r['live_ci_ms'][0]:.3f},{r['live_ci_ms'][1]:.3f},{r['sim_ci_ms'][0]:.3f},"
                   f"{r['sim_ci_ms'][1]:.3f},{r['error_pct_ci'][0]:.2f},{r['error_pct_ci'][1]:.2f},"
                   f"{str(r['within_live_spread']).lower()}\n" for r in rows))
    write_text(out / "fidelity_requests.csv", per_request_csv(live_ok, sim_ok))
    title = f"{live_dir.name} vs {Path(result['twin_scenario']).stem}: {n_runs} run(s), {result['requests_paired']} requests"
    _plot(ttft_groups, rows, out / "fidelity_ttft.png", confidence, n_boot, title)


def _plot(groups, rows: list[dict], path: Path, confidence: float, n_boot: int, title: str) -> None:
    """The deployment's fidelity figure: live and sim TTFT CDFs, each with its bootstrap band
    (the interval of every percentile 1..99), and the error per percentile with its interval."""
    import matplotlib.pyplot as plt

    qs = np.arange(1, 100)
    live_b, sim_b = bootstrap_percentiles(groups, qs, n=min(n_boot, 400), seed=1)
    a = (1 - confidence) / 2
    lv = np.concatenate([g[0] for g in groups])
    sv = np.concatenate([g[1] for g in groups])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for data, boot, label, color in ((lv, live_b, "live (vLLM)", "C0"), (sv, sim_b, "simulator (twin)", "C1")):
        x = np.sort(data)
        ax1.plot(x, np.arange(1, len(x) + 1) / len(x), label=label, color=color)
        lo, hi = np.quantile(boot, a, axis=0), np.quantile(boot, 1 - a, axis=0)
        ax1.fill_betweenx(qs / 100, lo, hi, color=color, alpha=0.2, linewidth=0)
    ax1.set_xscale("log")
    ax1.set_xlabel("TTFT (ms, log)")
    ax1.set_ylabel("CDF")
    ax1.set_title(f"TTFT, {100 * confidence:.0f}% bands")
    ax1.legend()
    labels = [f"p{r['percentile']}" for r in rows]
    err = np.array([r["error_pct"] for r in rows])
    lo = err - np.array([r["error_pct_ci"][0] for r in rows])
    hi = np.array([r["error_pct_ci"][1] for r in rows]) - err
    colors = ["C2" if r["within_live_spread"] else "C3" for r in rows]
    ax2.bar(labels, err, color=colors, yerr=[np.maximum(lo, 0), np.maximum(hi, 0)], capsize=3)
    ax2.axhline(0, color="black", linewidth=0.8)
    ax2.set_ylabel("sim - live (% of live TTFT)")
    ax2.set_title("error per percentile (green: within the live run's own spread)")
    fig.suptitle(title)
    save_figure(fig, path)
