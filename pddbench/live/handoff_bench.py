"""`pddbench handoff-bench`, its live parts: the handoffs over the emulated WAN (pddbench/measure/handoff_bench.py
runs the command).

(a) KV handoff: the incremental KV of N tokens (real bytes of the given geometry, gathered from a
    paged pool into one buffer: the memory-copy step) shipped from dc-a to dc-b;
(b) token handoff: N token ids shipped, then recomputed on MD in one extend step: measured on a
    real engine with --md-endpoint, otherwise the scenario's MD latency model (stated in the output).
"""

from __future__ import annotations

import json
import subprocess
import sys
from contextlib import nullcontext
from pathlib import Path

import numpy as np

from netem.topology import DC_A, DC_B
from pddbench.core.errors import UserError
from pddbench.live.net import free_port, wait_port
from pddbench.live.wan import emulated_wan

ARTICLE = {"kv_payload_kib": 4649, "kv_mean_ms": 185.0, "kv_peak_ms": 512.6, "kv_copy_ms": 24.5,
           "token_max_ms": 321.4, "token_payload_kib_max": 1.5}


def stats(values) -> dict:
    v = np.asarray(values, dtype=float)
    return {"mean": float(v.mean()), "p50": float(np.percentile(v, 50)), "p99": float(np.percentile(v, 99)),
            "max": float(v.max())}


def _wire(role: str, host: str, port: int, netns: str | None, args: list[str]) -> list[str]:
    cmd = [sys.executable, "-m", "pddbench.live.handoff_wire", role, "--host", host, "--port", str(port), *args]
    return ["ip", "netns", "exec", netns, *cmd] if netns else cmd


def run_wire(tokens: int, kv_bytes_per_token: int, trials: int, seed: int, loopback: bool) -> list[dict]:
    """Receiver in dc-b, sender in dc-a (or both on loopback); returns the sender's rows."""
    src_ns, dst_ns, dst_host = None, None, "127.0.0.1"
    if not loopback:
        src_ns, dst_ns, dst_host = DC_A.netns, DC_B.netns, DC_B.address
    port = free_port()
    max_bytes = tokens * kv_bytes_per_token + 4096  # the KV of `tokens` and a header
    sink = subprocess.Popen(_wire("serve", dst_host, port, dst_ns, ["--max-bytes", str(max_bytes)]),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        wait_port(dst_host, port, dst_ns)
        args = ["--tokens", str(tokens), "--kv-bytes-per-token", str(kv_bytes_per_token), "--trials", str(trials),
                "--seed", str(seed)]
        res = subprocess.run(_wire("measure", dst_host, port, src_ns, args), capture_output=True, text=True)
        if res.returncode != 0:
            raise UserError(f"handoff measurement failed: {res.stderr.strip()[-800:]}")
        return json.loads(res.stdout)
    finally:
        sink.kill()
        sink.wait(timeout=10)


def measure_over_link(tokens: int, kv_bytes_per_token: int, trials: int, seed: int, link_profile,
                      loopback: bool) -> tuple[list[dict], dict]:
    """The wire trials over the emulated WAN (up for these trials only) or plain loopback; returns
    the rows and the link they crossed."""
    with (nullcontext(None) if loopback else emulated_wan(link_profile)) as state:
        rows = run_wire(tokens, kv_bytes_per_token, trials, seed, loopback)
    if state is None:
        return rows, {"profile": "loopback", "backend": "loopback"}
    return rows, {"profile": link_profile.name, "backend": state.get("backend", "?")}


def recompute_engine_ms(endpoint: str, model: str, tokens: int, context_tokens: int, trials: int, seed: int) -> list[float]:
    """Extend steps measured on a real engine: the context is cached first, then each trial
    sends context + `tokens` new ids with max_tokens 1 (time to the response)."""
    import time
    import urllib.request

    rng = np.random.default_rng(seed)
    context = rng.integers(16, 1000, size=context_tokens).tolist()

    def post(prompt: list[int]) -> None:
        body = json.dumps({"model": model, "prompt": prompt, "max_tokens": 1, "temperature": 0.0}).encode()
        req = urllib.request.Request(endpoint.rstrip("/") + "/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as resp:
            resp.read()
    try:
        post(context)
        out = []
        for _ in range(trials):
            tail = rng.integers(16, 1000, size=tokens).tolist()
            t0 = time.monotonic()
            post(context + tail)
            out.append((time.monotonic() - t0) * 1e3)
        return out
    except OSError as exc:
        raise UserError(f"--md-endpoint {endpoint}: {exc}; is an engine serving model {model!r} there?") from None


def summarize_bench(rows: list[dict], recompute_ms: list[float], recompute_source: str, meta: dict) -> dict:
    kv_ms = [r["kv_ms"] for r in rows]
    token_ms = [r["token_network_ms"] + rc for r, rc in zip(rows, recompute_ms)]
    return {
        **meta,
        "kv_handoff": {"bytes": rows[0]["kv_bytes"], "kib": rows[0]["kv_bytes"] / 1024, "latency_ms": stats(kv_ms),
                       "copy_ms": stats([r["kv_copy_ms"] for r in rows]),
                       "transfer_ms": stats([r["kv_transfer_ms"] for r in rows])},
        "token_handoff": {"bytes": rows[0]["token_bytes"], "kib": rows[0]["token_bytes"] / 1024,
                          "latency_ms": stats(token_ms), "network_ms": stats([r["token_network_ms"] for r in rows]),
                          "recompute_ms": stats(recompute_ms), "recompute_source": recompute_source},
        "article": ARTICLE,
    }


def plot(rows: list[dict], recompute_ms: list[float], summary: dict, path: Path) -> None:
    import matplotlib.pyplot as plt

    from pddbench.core.io import save_figure

    kv = np.sort([r["kv_ms"] for r in rows])
    tok = np.sort([r["token_network_ms"] + rc for r, rc in zip(rows, recompute_ms)])
    fig, ax = plt.subplots(figsize=(7, 4))
    q = np.arange(1, len(kv) + 1) / len(kv)
    ax.plot(kv, q, label=f"KV handoff ({summary['kv_handoff']['kib']:.0f} KiB), measured")
    ax.plot(tok, q, label=f"token-id handoff ({summary['token_handoff']['bytes']} B + recompute), measured")
    for x, style, label in ((ARTICLE["kv_mean_ms"], "--", "article: KV mean 185 ms"),
                            (ARTICLE["kv_peak_ms"], ":", "article: KV peak 512.6 ms"),
                            (ARTICLE["token_max_ms"], "-.", "article: token-id max 321.4 ms")):
        ax.axvline(x, color="grey", linestyle=style, label=label)
    ax.set_xscale("log")
    ax.set_xlabel("handoff latency (ms, log)")
    ax.set_ylabel("CDF over trials")
    ax.set_title(f"{summary['tokens']}-token handoff over {summary['link']['profile']}")
    ax.legend(fontsize=7, loc="lower right")
    save_figure(fig, path)


def write_bench(run_dir: Path, rows: list[dict], recompute_ms: list[float], summary: dict) -> None:
    import pandas as pd

    from pddbench.core.io import write_json, write_text

    frame = pd.DataFrame(rows).assign(token_recompute_ms=recompute_ms)
    write_text(run_dir / "trials.csv", frame.to_csv(index=False))
    write_json(run_dir / "handoff_bench.json", summary)
    plot(rows, recompute_ms, summary, run_dir / "handoff_latency_cdf.png")


def describe(summary: dict) -> list[str]:
    """Two lines for the terminal: each handoff measured, beside the article's numbers."""
    kv, tk, a = summary["kv_handoff"], summary["token_handoff"], ARTICLE
    return [f"KV handoff: {kv['kib']:.0f} KiB, mean {kv['latency_ms']['mean']:.1f} / p99 {kv['latency_ms']['p99']:.1f} / "
            f"max {kv['latency_ms']['max']:.1f} ms (copy {kv['copy_ms']['mean']:.1f} ms)   "
            f"article: {a['kv_payload_kib']} KiB, {a['kv_mean_ms']} / peak {a['kv_peak_ms']} ms, copy +{a['kv_copy_ms']} ms",
            f"token handoff: {tk['bytes']} B, mean {tk['latency_ms']['mean']:.1f} / p99 {tk['latency_ms']['p99']:.1f} / "
            f"max {tk['latency_ms']['max']:.1f} ms (recompute {tk['recompute_ms']['mean']:.1f} ms, "
            f"{tk['recompute_source']})   article: <= {a['token_payload_kib_max']} KiB, max {a['token_max_ms']} ms"]
