"""vLLM's own load generator (`vllm bench serve`) against an OpenAI endpoint, for
`pddbench replay-bench --against-vllm-bench`: the anchor our replay client is compared with.

Run as `python -m pddbench.live.vllm_bench ARGS`: vLLM's benchmark called through its Python API
(this venv's `vllm` console script cannot start: the package has no installed metadata). The
parent reads its detailed result: per-request start times and TTFTs, in request order."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

# our arrival processes as vLLM's gamma "burstiness": 1 is Poisson, inf is evenly spaced
BURSTINESS = {"poisson": 1.0, "gamma": 0.5, "constant": math.inf}
PREFIX = "pddbench-vb-"


def unavailable() -> str | None:
    """Why vLLM's tool cannot run here, or None."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return "vLLM is not installed (`make test` installs it)"
    return None


def run(endpoint: str, tokenizer: Path, rate_rps: float, requests: int, arrival: str, tokens: int, seed: int,
        cpus: set[int] | None, log: Path) -> dict:
    """One `vllm bench serve` run; returns {'start_s': [...], 'ttft_s': [...], 'errors': [...],
    'request_ids': [...]}, or raises RuntimeError (its output is in `log`)."""
    with tempfile.TemporaryDirectory(prefix="pddbench-vllm-bench-") as tmp:
        args = ["--backend", "openai", "--base-url", endpoint, "--endpoint", "/v1/completions", "--model", "fixed",
                "--tokenizer", str(tokenizer), "--dataset-name", "random", "--random-input-len", "4",
                "--random-output-len", str(tokens), "--ignore-eos", "--num-prompts", str(requests),
                "--request-rate", str(rate_rps), "--burstiness", str(BURSTINESS[arrival]), "--seed", str(seed),
                "--request-id-prefix", PREFIX, "--disable-shuffle", "--disable-tqdm", "--save-result",
                "--save-detailed", "--result-dir", tmp, "--result-filename", "result.json"]
        with open(log, "w") as out:
            res = subprocess.run([sys.executable, "-m", "pddbench.live.vllm_bench", *args], stdout=out,
                                 stderr=subprocess.STDOUT, timeout=max(300, 10 * requests / rate_rps),
                                 preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
        result = Path(tmp) / "result.json"
        if res.returncode != 0 or not result.is_file():
            raise RuntimeError(f"vllm bench serve failed (exit {res.returncode})")
        data = json.loads(result.read_text())
    return {"start_s": data["start_times"], "ttft_s": data["ttfts"], "errors": data["errors"],
            "request_ids": [f"{PREFIX}{i}" for i in range(len(data["start_times"]))]}


def main(argv: list[str]) -> None:
    from vllm.benchmarks.serve import add_cli_args, main as bench_main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    bench_main(parser.parse_args(argv))


if __name__ == "__main__":
    main(sys.argv[1:])
