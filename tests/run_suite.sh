#!/usr/bin/env bash
# The whole suite as three pytest processes side by side (`make test`), each a lane (tests/lane.py):
# - the WAN lane: machine-wide tests of the emulated WAN's namespaces, qdiscs and delay lines, and
#   of Ray (one of each per machine), one after another, in the foreground;
# - the engine lane: the other machine-wide tests (vLLM engines on loopback), one after another;
# - every other test.
# The lanes are marked in tests/conftest.py. Exit status: non-zero if any lane failed; the engine
# lane's and the other tests' reports follow the WAN lane's. Usage:
#   tests/run_suite.sh PYTHON [pytest arguments...]
set -uo pipefail
python="$1"; shift
lane="$(dirname "$0")/lane.py"
rest_log="$(mktemp -t pddbench-tests-XXXXXX.log)"
engine_log="$(mktemp -t pddbench-engine-tests-XXXXXX.log)"
"$python" "$lane" "$python" -m pytest -q -p no:cacheprovider -m "not machine_wide" "$@" >"$rest_log" 2>&1 &
rest=$!
"$python" "$lane" "$python" -m pytest -q -p no:cacheprovider -m "machine_wide and not wan_lane" "$@" >"$engine_log" 2>&1 &
engines=$!
trap 'kill -INT "$rest" "$engines" 2>/dev/null; wait "$rest" "$engines" 2>/dev/null; rm -f "$rest_log" "$engine_log"' INT TERM
echo "the engine lane and the tests that need no engine run beside these; their reports follow"
"$python" "$lane" "$python" -m pytest -q -m "machine_wide and wan_lane" "$@"
wan=$?
wait "$engines"
engine=$?
wait "$rest"
other=$?
echo "---- the engine lane (machine-wide tests on loopback engines) ----"
cat "$engine_log"
echo "---- the tests that need no engine ----"
cat "$rest_log"
rm -f "$rest_log" "$engine_log"
# pytest's 5 (nothing collected, e.g. a -k that selects only one kind) is no failure here
status=0
for s in "$wan" "$engine" "$other"; do
  [ "$s" -ne 0 ] && [ "$s" -ne 5 ] && status=1
done
exit $status
