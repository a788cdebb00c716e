"""A YAML SafeLoader that refuses duplicate mapping keys, for scenarios, sweeps and link profiles
alike (netem is the ground floor, so pddbench takes it from here)."""

from __future__ import annotations

import re

import yaml


class StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate mapping keys (YAML says they are an error; PyYAML keeps
    the last one silently)."""


def _construct_mapping(loader: StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    loader.flatten_mapping(node)
    seen: dict = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key '{key}'", key_node.start_mark)
        except TypeError:  # an unhashable key: let the base constructor say so
            break
        seen[key] = True
    return yaml.SafeLoader.construct_mapping(loader, node, deep)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)

# YAML 1.2 reads 1e-05 and 1.5e3 (no dot, or no exponent sign) as numbers; PyYAML's YAML 1.1 rule
# keeps them strings, so a tolerance written `abs: 1e-05` was refused as "not a number".
StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."))
