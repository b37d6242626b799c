"""YAML for recipes and suites without alias blow-ups.

PyYAML's safe loader shares one object per anchor, so a "billion laughs" file parses
quickly but becomes exponentially large as soon as anything walks it (validation, JSON,
hashing). The composed node graph is measured with its aliases expanded first, and a
document over the limit is refused before any Python object is built.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

MAX_NODES = 100_000  # the largest paper recipe has a few hundred


class _Loader(yaml.SafeLoader):
    """The safe loader, reading `1e20` and `1e-5` as numbers as YAML 1.2 does (YAML 1.1 wants a
    dot and a signed exponent, `1.0e+20`; without them a setting got "not a valid integer"
    instead of the bound it passes)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"), list("-+0123456789")
)


class YamlTooLarge(ValueError):
    """A YAML document expands to more nodes than MAX_NODES."""


def expanded_size(node: yaml.Node, limit: int = MAX_NODES) -> int:
    """Nodes in the document with every alias expanded; stops counting past `limit`."""
    memo: dict[int, int] = {}

    def size(current: yaml.Node) -> int:
        key = id(current)
        if key in memo:
            return memo[key]
        memo[key] = limit + 1  # a node reached again while counting it: a cycle
        total = 1
        if isinstance(current, yaml.SequenceNode):
            children = current.value
        elif isinstance(current, yaml.MappingNode):
            children = [part for pair in current.value for part in pair]
        else:
            children = []
        for child in children:
            total += size(child)
            if total > limit:
                break
        memo[key] = min(total, limit + 1)
        return memo[key]

    return size(node)


def load_yaml(text: str, limit: int = MAX_NODES) -> Any:
    """Like yaml.safe_load, but YamlTooLarge for documents over `limit` nodes once aliases expand."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        size = expanded_size(node, limit)
        if size > limit:
            mark = node.start_mark
            raise YamlTooLarge(
                f"the YAML expands to more than {limit:,} values (anchors and *aliases repeated inside one "
                f"another, from line {mark.line + 1}): write the settings out, without nested aliases"
            )
        return loader.construct_document(node)
    finally:
        loader.dispose()
