"""Run the CLI in this process (fast enough for property tests): exit code, stdout, stderr."""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass


@dataclass
class Result:
    code: int
    out: str
    err: str

    @property
    def one_line(self) -> bool:
        return len(self.err.strip().splitlines()) == 1 and "Traceback" not in self.err


def cli(*args: str) -> Result:
    from pddbench.cli import main

    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main([str(a) for a in args])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return Result(code, out.getvalue(), err.getvalue())
