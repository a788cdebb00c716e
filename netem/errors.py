"""User-facing errors, defined here because netem must not import pddbench; pddbench.core.errors
re-exports them, so the CLI prints both packages' errors as one line and exits 2."""

from __future__ import annotations


class UserError(Exception):
    """Bad input or a request the tool cannot honour; the message tells the user what to do."""

    exit_code = 2


class InputError(UserError):
    """Bad content in an input file, located by file, line and field."""

    def __init__(self, path: str, message: str, line: int | None = None, field: str | None = None):
        self.path, self.line, self.field = str(path), line, field
        where = self.path + (f":{line}" if line is not None else "")
        what = f" field '{field}':" if field else ""
        super().__init__(f"{where}:{what} {message}")
