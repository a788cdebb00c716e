#!/usr/bin/env bash
# How often does the nightly live gate cry wolf, and does it catch a real slowdown?
# One baseline (the nightly's live same-DC PD run: repeats of the tiny model on vLLM CPU), then
# RUNS candidates of unchanged code (each must pass) and one with an injected regression, the PD
# proxy holding every request DELAY_MS (live.front_added_delay_ms; must fail). Results under OUT:
# each run folder, gate-*.md/json and summary.txt. Live runs take the project's live lock, so this
# can share the machine with tests.
#   usage: benchmarks/live_gate_check.sh [OUT] [RUNS] [DELAY_MS]
set -u
OUT=${1:-results/live-gate-check/$(date -u +%Y%m%dT%H%M%S)}
RUNS=${2:-5}
DELAY_MS=${3:-250}
LOCK=${PDDBENCH_LIVE_LOCK:-/tmp/pddbench-live.lock}
PDD=${PDDBENCH:-.venv/bin/pddbench}
SETS=(--set workload.synth.requests=40 --set live.load=null --set live.concurrency=1 --set live.calibrate_engine=false)  # as scenarios/gate/nightly.yaml
mkdir -p "$OUT"
run() {  # name, extra args...
  local name=$1; shift
  flock "$LOCK" "$PDD" run live/same-dc-pd "${SETS[@]}" --repeat 3 --out "$OUT/$name" "$@" >"$OUT/$name.log" 2>&1
}
gate() {  # name -> exit code of the gate
  "$PDD" gate "$OUT/$1" --baseline "$OUT/baseline" --markdown "$OUT/gate-$1.md" --json "$OUT/gate-$1.json" \
    --history "$OUT/history" >"$OUT/gate-$1.log" 2>&1
}
started=$(date +%s)
run baseline || { echo "baseline run failed: $OUT/baseline.log"; exit 2; }
: >"$OUT/summary.txt"
alarms=0
for i in $(seq 1 "$RUNS"); do
  run "unchanged-$i" || { echo "unchanged-$i: run failed" >>"$OUT/summary.txt"; continue; }
  gate "unchanged-$i"; rc=$?
  [ "$rc" = 1 ] && alarms=$((alarms + 1))
  echo "unchanged-$i: gate exit $rc (0 pass, 1 regression)" >>"$OUT/summary.txt"
done
run "delay-${DELAY_MS}ms" --set "live.front_added_delay_ms=$DELAY_MS" && gate "delay-${DELAY_MS}ms"; caught=$?
echo "delay-${DELAY_MS}ms: gate exit $caught (1 = caught)" >>"$OUT/summary.txt"
echo "false alarms: $alarms of $RUNS unchanged runs; injected ${DELAY_MS} ms front delay: $([ "$caught" = 1 ] && echo caught || echo MISSED); $(( ($(date +%s) - started) / 60 )) min; host $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/summary.txt"
