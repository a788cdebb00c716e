"""A live run's summary: the simulator's summary keys from the replayed records, plus what only a
live run knows (endpoint, schedule lag, engine counters, where each engine ran, the link's
calibration)."""

from __future__ import annotations

import json
from pathlib import Path

from pddbench.core.io import write_json
from pddbench.live.engines import EngineSpec
from pddbench.metrics.summary import summarize
from pddbench.core.provenance import provenance
from pddbench.metrics.records import read_records


def _link_facts(calibration: dict | None) -> dict:
    """What the provenance records of the emulated WAN: its backend and whether its calibration
    met the profile's targets (None on one host)."""
    if calibration is None:
        return {"netem_backend": None, "link_calibration_valid": None}
    return {"netem_backend": calibration.get("backend"), "link_calibration_valid": calibration.get("valid")}


def _within(path: str, run_dir: Path) -> str:
    """A path inside the run folder, relative to it: a summary names no machine's directories
    (baselines are shipped; the tiny model is built in the run folder)."""
    try:
        return str(Path(path).resolve().relative_to(run_dir.resolve()))
    except ValueError:
        return path


def live_summary(sc, run_dir: Path, specs: list[EngineSpec], engine_metrics: dict, calibration: dict | None,
                 model_dir: str, kv_bytes_per_token: int, load: dict | None = None, extra: dict | None = None) -> dict:
    """Move the replay's records to the run folder, summarise them and write summary.json (and
    calibration.json when the link was calibrated); a link outside its tolerance marks the run invalid."""
    kind = sc.deployment.kind
    replay_summary = json.loads((run_dir / "replay" / "summary.json").read_text())
    (run_dir / "replay" / "records.parquet").replace(run_dir / "records.parquet")
    records = read_records(run_dir / "records.parquet")
    summary = summarize(records, deployment=kind, sla_ttft_ms=sc.sla.ttft_ms, sla_tpot_ms=sc.sla.tpot_ms,
                        sla_percentile_q=sc.sla.percentile)
    summary.update({k: replay_summary[k] for k in ("endpoint", "schedule_lag_p99_ms", "schedule_ok", "interrupted",
                                                        "replay_workers")})
    summary.update({"scenario": sc.name, "seed": sc.seed, "deployment": kind, "runtime": "live", "engine_metrics": engine_metrics,
                    "link_calibration": calibration, "model_dir": _within(model_dir, run_dir), "cost_per_hour": None,
                    # the served model's, as the router and calibration used it (the simulator's twin takes it)
                    "kv_bytes_per_token": kv_bytes_per_token,
                    # where each engine ran: placement changes results on a small host
                    "engines": [{"name": e.name, "cpu": e.cpu, "cores": sorted(e.cores) if e.cores else None,
                                 "gpus": list(e.gpus) if e.gpus else None, "host": e.host, "port": e.port,
                                 "netns": e.netns, "kv_role": e.kv_role,
                                 "attached": sc.live.attach is not None,
                                 "preload": [Path(lib).name for lib in e.preload_list()]} for e in specs],
                    "provenance": provenance(**_link_facts(calibration))})
    # live.load: the capacity measured before the replay and the rate it gave; else the fixed rate
    load = load or {}
    summary.update({"load": load.get("load"), "capacity_rps": load.get("capacity_rps"),
                    "capacity_probe": load.get("capacity_probe"),
                    "replay_rate_rps": load.get("replay_rate_rps", sc.live.rate_rps)})
    if calibration is not None:
        write_json(run_dir / "calibration.json", calibration)
        if not calibration["valid"]:
            summary["invalid"] = calibration["invalid_reason"]
            from rich.console import Console

            Console(stderr=True).print(f"[bold red]RUN INVALID[/]: {calibration['invalid_reason']}")
    summary.update(extra or {})
    write_json(run_dir / "summary.json", summary)
    return summary
