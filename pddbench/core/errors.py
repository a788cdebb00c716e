"""User-facing errors: the CLI prints them as one clear line and exits 2, no traceback.

They are netem's classes (netem loads link profiles and must not import pddbench), so an error
raised by either package is caught as the same UserError / InputError."""

from __future__ import annotations

from netem.errors import InputError, UserError

__all__ = ["InputError", "Interrupted", "RunFailed", "SimulationStalled", "UserError", "is_interrupt"]


class Interrupted(KeyboardInterrupt):
    """Ctrl-C, carrying one line that says what was kept; the CLI prints it and exits 130."""


def is_interrupt(exc: BaseException) -> bool:
    """A Ctrl-C, or an error Python raised because of one: a Ctrl-C that lands while a class is
    being created (a module's import) comes out of Python 3.11 as "RuntimeError: Error calling
    __set_name__ ..." with the KeyboardInterrupt as its cause, and one that lands in a pydantic
    serializer written in Python (a scenario's model_dump_json) as a PydanticSerializationError
    whose message names it and which has no cause at all; such an error is the user's Ctrl-C,
    not a bug."""
    seen = 0
    while exc is not None and seen < 16:  # a cause chain is short; the bound keeps a cycle finite
        if isinstance(exc, KeyboardInterrupt) or _pydantic_wrapped_interrupt(exc):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def _pydantic_wrapped_interrupt(exc: BaseException) -> bool:
    # pydantic-core turns any exception of a Python serializer into its own error and keeps only
    # the text ("Error calling function `f`: KeyboardInterrupt: "), so the text is all there is
    return type(exc).__name__ == "PydanticSerializationError" and ": KeyboardInterrupt" in str(exc)


class RunFailed(UserError):
    """The run finished and wrote its folder, but nothing in it succeeded (exit 1)."""

    exit_code = 1


class SimulationStalled(UserError):
    """The simulator's event loop stopped making progress (pddbench/sim/engine.py's watchdog): a
    value at the edge of what the schema accepts, or a simulator bug. One line naming the stuck
    request, exit 1, no folder left half-written."""

    exit_code = 1
