"""The shipped models (pddbench/models/shipped/<name>.yaml): each a scenario's `model:` section,
with where its facts come from (`source`) and the sizes its makers published (`published`, which
the tests hold the derived sizes against). A scenario names one as `model: NAME`; `model.arch`
may name a shipped model's architecture, or a Hugging Face config.json file."""

from __future__ import annotations

from pathlib import Path

import yaml

SHIPPED = Path(__file__).resolve().parent / "shipped"


def model_names() -> list[str]:
    return sorted(p.stem for p in SHIPPED.glob("*.yaml"))


def shipped_entry(name: str) -> dict:
    """The whole file of a shipped model: {source, published?, model}. ValueError names the choices."""
    path = SHIPPED / f"{name}.yaml"
    if not name or "/" in name or not path.is_file():
        raise ValueError(f"no shipped model {name!r}; shipped: {', '.join(model_names())} "
                         "(or give the model's fields, or model.arch as a config.json path)")
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def shipped_model(name: str) -> dict:
    return dict(shipped_entry(name)["model"])


def shipped_arch(ref: str) -> dict:
    """model.arch given as a string: a shipped model's architecture, else a config.json path."""
    path = Path(ref)
    if path.suffix == ".json":
        if not path.is_file():
            raise ValueError(f"model.arch: no such config.json file {ref!r}")
        from pydantic import ValidationError

        from pddbench.models.architecture import Architecture
        try:
            return Architecture.from_config_json(path).model_dump(exclude_unset=True)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            raise ValueError(f"model.arch: {ref}: {where + ': ' if where else ''}"
                             f"{err['msg'].removeprefix('Value error, ')}") from None
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise ValueError(f"model.arch: {ref}: {str(exc).splitlines()[0]}") from None
    model = shipped_model(ref)
    if "arch" not in model:
        raise ValueError(f"model.arch: shipped model {ref!r} is given by its sizes, not an architecture; "
                         f"use model: {ref}")
    return dict(model["arch"])
