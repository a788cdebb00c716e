#!/usr/bin/env bash
# The simulator's latency model checked and fitted on the GPU this runs on (issue 38.3); not part
# of `make test`. One command, no download, under 8 minutes on one H100:
#   1. step times of a Llama-3-8B-class architecture (benchmarks/gpu/llama-3-8b/config.json, vLLM's
#      dummy weights) over a grid of prefill lengths and decode batches x contexts; the roofline's
#      error before the fit (the paper scenarios' H100 terms) and after fitting this chip's terms
#      (pddbench/measure/gpu_calibration.py);
#   2. one live same-DC PD and one live PDD run on this GPU (the tiny model, as
#      benchmarks/gpu/live_pdd.sh), each replayed through its simulator twin (`pddbench fidelity`):
#      TTFT and TPOT percentile errors. Needs root for the datacenters' network namespaces.
# Results under $OUT (set by the device runner) or results/gpu-calibration/<stamp>/.
#   usage: benchmarks/gpu/calibrate.sh [--chip h100|a100] [--requests N] [--skip-live]
set -euo pipefail
cd "$(dirname "$0")/../.."
CHIP=h100 REQUESTS=40 LIVE=1
while [ $# -gt 0 ]; do
  case "$1" in
    --chip) CHIP=$2; shift 2 ;;
    --requests) REQUESTS=$2; shift 2 ;;
    --skip-live) LIVE=0; shift ;;
    *) echo "usage: $0 [--chip h100|a100] [--requests N] [--skip-live]" >&2; exit 2 ;;
  esac
done
OUT=${OUT:-results/gpu-calibration/$(date -u +%Y%m%dT%H%M%S)}
VENV=${PDDBENCH_GPU_VENV:-.venv-gpu}
command -v nvidia-smi >/dev/null || { echo "no nvidia-smi: this script needs a CUDA GPU host" >&2; exit 2; }
# A host that cannot download: point PDDBENCH_GPU_VENV at an environment holding the project and
# vLLM's CUDA build; else a new one sees the system's packages (a preinstalled vLLM) and installs
# the project's `gpu` extra, or the project alone when that needs the network.
if [ ! -x "$VENV/bin/pddbench" ]; then
  python3 -m venv --system-site-packages "$VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".[gpu,dev]" || \
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps -e .
fi
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"

echo "== 1. step times and the roofline's fit (llama-3-8b architecture, dummy weights)"
"$VENV/bin/python" -m pddbench.measure.gpu_calibration --config benchmarks/gpu/llama-3-8b --model llama-3-8b \
  --chip "$CHIP" --out "$OUT/steps"

[ "$LIVE" = 1 ] || exit 0
echo "== 2. live same-DC PD and PDD on this GPU, each against its simulator twin"
"$VENV/bin/pddbench" model tiny --out "$OUT/model" >/dev/null
for kind in same-dc-pd pdd; do
  "$VENV/bin/pddbench" run "benchmarks/gpu/live-$kind.yaml" --set "live.model_dir=$OUT/model" \
    --set "workload.synth.requests=$REQUESTS" --out "$OUT/$kind"
  "$VENV/bin/pddbench" fidelity "$OUT/$kind" --out "$OUT/$kind/fidelity"
done
"$VENV/bin/python" - "$OUT" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
print("host GPU:", (out / "gpu.txt").read_text().strip())
for kind in ("same-dc-pd", "pdd"):
    fid = json.loads((out / kind / "fidelity" / "fidelity.json").read_text())
    for metric in ("ttft", "tpot"):
        rows = fid.get(metric) or []
        print(f"{kind}: sim vs live {metric.upper()} error by percentile: "
              + (", ".join(f"p{r['percentile']:g} {r['error_pct']:+.1f} %" for r in rows) or "none measured"))
PY
