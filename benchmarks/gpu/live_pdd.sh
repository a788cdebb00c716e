#!/usr/bin/env bash
# One live PDD scenario with a small real model on one GPU (issue 28.6); not part of `make test`.
# Needs a CUDA host with root (network namespaces for the two datacenters). It installs the
# project with its `gpu` extra into .venv-gpu (vLLM's CUDA build and NIXL instead of the CPU
# build), builds the tiny model, runs benchmarks/gpu/live-pdd.yaml and prints the summary's
# headline figures with the GPU they came from. Results under OUT.
#   usage: benchmarks/gpu/live_pdd.sh [OUT] [REQUESTS]
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-results/gpu-live-pdd/$(date -u +%Y%m%dT%H%M%S)}
REQUESTS=${2:-60}
VENV=${PDDBENCH_GPU_VENV:-.venv-gpu}
command -v nvidia-smi >/dev/null || { echo "no nvidia-smi: this script needs a CUDA GPU host" >&2; exit 2; }
if [ ! -x "$VENV/bin/pddbench" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".[gpu,dev]"
fi
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
"$VENV/bin/pddbench" model tiny --out "$OUT/model" >/dev/null
"$VENV/bin/pddbench" run benchmarks/gpu/live-pdd.yaml --set "live.model_dir=$OUT/model" \
  --set "workload.synth.requests=$REQUESTS" --out "$OUT/run"
"$VENV/bin/python" - "$OUT/run/summary.json" "$OUT/gpu.txt" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
gpu = open(sys.argv[2]).read().strip()
print(f"host GPU: {gpu}")
print(f"requests completed {s['requests_completed']}, failed {s['requests_failed']}")
for k in ("ttft_ms", "tpot_ms"):
    v = s.get(k) or {}
    print(f"{k}: mean {v.get('mean')}, p90 {v.get('p90')}")
print("engines:", [(e["name"], e["gpus"], e["netns"]) for e in s["engines"]])
PY
