#!/usr/bin/env bash
# The whole suite as two pytest processes side by side (`make test`): the machine-wide tests
# (engines, namespaces, Ray: marked in tests/conftest.py) one after another in the foreground,
# every other test in the background. Exit status: non-zero if either failed. Usage:
#   tests/run_suite.sh PYTHON [pytest arguments...]
set -uo pipefail
python="$1"; shift
log="$(mktemp -t pddbench-tests-XXXXXX.log)"
"$python" -m pytest -q -p no:cacheprovider -m "not machine_wide" "$@" >"$log" 2>&1 &
rest=$!
trap 'kill -INT "$rest" 2>/dev/null; wait "$rest" 2>/dev/null; rm -f "$log"' INT TERM
echo "the tests that need no engine run beside these; their report follows"
"$python" -m pytest -q -m machine_wide --durations=12 "$@"  # the slowest: where the suite's time goes
machine=$?
wait "$rest"
other=$?
echo "---- the tests that need no engine ----"
cat "$log"
rm -f "$log"
# pytest's 5 (nothing collected, e.g. a -k that selects only one kind) is no failure here
[ "$machine" -eq 5 ] && machine=0
[ "$other" -eq 5 ] && other=0
exit $(( machine != 0 || other != 0 ))
