"""Run one lane of the suite (tests/run_suite.sh): `python tests/lane.py COMMAND...`.

The lane's root is this process, a child subreaper: a process the lane started whose parent died
(an engine that escaped its teardown) is re-parented here, not to init, so it is still found as the
lane's own (tests/conftest.py started_here, by PDDBENCH_TEST_LANE_ROOT) and another lane's engines
are never taken for this one's leftovers. Every orphan that exits is reaped here at once: a zombie
left behind would still match `pgrep -f raylet` and fail a check for stray Ray processes.
Exits with the command's status; a Ctrl-C reaches the command (the terminal sends it to both) and a
SIGTERM is passed on to it."""

import ctypes
import os
import signal
import subprocess
import sys

PR_SET_CHILD_SUBREAPER = 36


def main() -> int:
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    env = {**os.environ, "PDDBENCH_TEST_LANE_ROOT": str(os.getpid())}
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the command hears Ctrl-C itself and reports
    child = subprocess.Popen(sys.argv[1:], env=env, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    signal.signal(signal.SIGTERM, lambda *_: child.send_signal(signal.SIGTERM))
    while True:
        try:
            pid, status = os.wait()  # the command, or an orphan of the lane
        except InterruptedError:
            continue
        if pid == child.pid:
            return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main())
