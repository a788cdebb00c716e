"""The valid range of a schema's numeric fields, read from the pydantic models themselves: for a
refusal that says what would be valid ("valid range: 1e-06 <= rate_gbps <= 1e+06"), and for the
property tests, which walk every numeric field of a schema (tests/test_extreme_values.py)."""

from __future__ import annotations

import types
import typing
from typing import Any, Iterator

from annotated_types import Ge, Gt, Le, Lt
from pydantic import BaseModel

Bounds = tuple[Any, bool, Any, bool]  # (low, low included, high, high included); None: unbounded


def _members(ann: Any) -> list[Any]:
    """The types a field's annotation allows, None left out (Optional, unions)."""
    if typing.get_origin(ann) in (typing.Union, types.UnionType):
        return [a for a in typing.get_args(ann) if a is not type(None)]
    return [ann]


def _metadata(ann: Any) -> tuple[Any, list]:
    """An Annotated type's base type and its constraints (also those inside a Field(...) there)."""
    if typing.get_origin(ann) is typing.Annotated:
        base, *extra = typing.get_args(ann)
        meta: list = []
        for m in extra:
            meta += getattr(m, "metadata", [m])
        return base, meta
    return ann, []


def bounds_of(metadata: list) -> Bounds | None:
    """The numeric bounds stated by ge/gt/le/lt constraints, or None when there are none."""
    lo = hi = None
    lo_in = hi_in = True
    for m in metadata:
        if isinstance(m, Ge):
            lo, lo_in = m.ge, True
        elif isinstance(m, Gt):
            lo, lo_in = m.gt, False
        elif isinstance(m, Le):
            hi, hi_in = m.le, True
        elif isinstance(m, Lt):
            hi, hi_in = m.lt, False
    return None if lo is None and hi is None else (lo, lo_in, hi, hi_in)


def field_bounds(model: type[BaseModel], loc: tuple) -> tuple[type | None, Bounds | None]:
    """(number type, bounds) of the value at `loc` (a pydantic error location or a dotted path
    split on dots) in `model`: dict keys, list indexes and union members are walked through."""
    ann: Any = model
    meta: list = []
    for part in loc:
        node = next((m for m in _members(_metadata(ann)[0]) if isinstance(m, type) and issubclass(m, BaseModel)),
                    None)
        if node is not None:
            field = node.model_fields.get(part) if isinstance(part, str) else None
            if field is None:
                return None, None
            ann, meta = field.annotation, list(field.metadata)
            continue
        container = next((m for m in _members(_metadata(ann)[0]) if typing.get_origin(m) in (dict, list, tuple)), None)
        if container is None:
            return None, None
        args = [a for a in typing.get_args(container) if a is not Ellipsis]
        if typing.get_origin(container) is dict:
            ann = args[1]
        elif typing.get_origin(container) is tuple and isinstance(part, int) and len(args) > 1:
            ann = args[part] if part < len(args) else args[-1]
        else:
            ann = args[0] if args else Any
        meta = []
    base, inner = _metadata(next(iter(_members(ann)), ann))
    number = next((m for m in _members(base) if m in (int, float)), None)
    return number, bounds_of(meta + inner)


def range_text(name: str, number: type | None, bounds: Bounds | None) -> str | None:
    """'valid range: 1e-06 <= rate_gbps <= 1e+06' (a finite number), or None without bounds."""
    if number is None or bounds is None:
        return None
    lo, lo_in, hi, hi_in = bounds

    def fmt(x: Any) -> str:
        return f"{x:,}" if isinstance(x, int) and number is int else f"{float(x):g}"

    text = name
    if lo is not None:
        text = f"{fmt(lo)} {'<=' if lo_in else '<'} {text}"
    if hi is not None:
        text = f"{text} {'<=' if hi_in else '<'} {fmt(hi)}"
    return f"valid range: {text}" + (" (a finite number)" if number is float else "")


def with_range(model: type[BaseModel], loc: tuple, message: str) -> str:
    """`message` with the valid range of the numeric field at `loc` added, where it has one."""
    number, bounds = field_bounds(model, loc)
    name = next((str(p) for p in reversed(loc) if isinstance(p, str)), "value")
    text = range_text(name, number, bounds)
    return message if text is None or "valid range" in message else f"{message}; {text}"


def numeric_fields(model: type[BaseModel], prefix: tuple = (), depth: int = 0) -> Iterator[tuple[tuple, type, Bounds | None]]:
    """(location, int or float, bounds) of every numeric field reachable from `model`, nested
    models included (not through dicts or lists, whose keys a caller chooses)."""
    if depth > 8:
        return
    for name, field in model.model_fields.items():
        for member in _members(field.annotation):
            base, inner = _metadata(member)
            if isinstance(base, type) and issubclass(base, BaseModel):
                yield from numeric_fields(base, (*prefix, name), depth + 1)
            elif base in (int, float):
                yield (*prefix, name), base, bounds_of(list(field.metadata) + inner)
