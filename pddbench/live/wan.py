"""The emulated WAN's lifecycle for live commands: up for one block, down after it, always."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from pddbench.core.errors import UserError


@contextmanager
def emulated_wan(profile) -> Iterator[dict]:
    """Bring dc-a / dc-b up with `profile` and yield netem's state; on exit (normal, error or
    Ctrl-C) remove every namespace, qdisc and delay line again. Leftovers of a crashed run are
    removed first, so a run never starts on a stale link."""
    from netem.manager import NetemError, down, up

    try:
        down()
        state = up(profile)  # up tears down itself when it fails half way
    except NetemError as exc:
        raise UserError(str(exc)) from None
    try:
        yield state
    finally:
        down()

