"""`--set KEY=VALUE` on a raw recipe: a dotted path into its sections, the value parsed as YAML.
A list of named entries (augmenters, train.dev, evaluate.tasks) is addressed by an entry's name,
as the recipe names it: `augmenters.bt_es.engine=hf`."""

from __future__ import annotations

from typing import Any

import yaml
from viewmill.pipelines.safe_yaml import YamlTooLarge, load_yaml

from viewmill.spelling import did_you_mean


class OverrideError(ValueError):
    """An override that cannot be applied; the message names it and the fix."""


def apply_overrides(raw: dict, overrides: list[str]) -> dict:
    """Each override applied to `raw` in order (sections made where missing)."""
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise OverrideError(f"override '{item}' is not KEY=VALUE (e.g. train.objective=ntxent)")
        *parents, leaf = key.strip().split(".")
        node: Any = raw
        for depth, part in enumerate(parents):
            node = _child(node, part, item, ".".join(parents[:depth]))
        try:
            parsed = load_yaml(value)
        except (yaml.YAMLError, YamlTooLarge) as exc:
            raise OverrideError(f"override '{item}': the value is not usable YAML ({exc})") from None
        if isinstance(node, list):  # a whole entry replaced: augmenters.bt_es={...}
            entry = _entry(node, leaf, item, ".".join(parents))
            node[node.index(entry)] = parsed
        else:
            node[leaf] = parsed
    return raw


def _child(node: Any, part: str, item: str, where: str) -> Any:
    """The section or list entry `part` of `node` (a missing section is made)."""
    if isinstance(node, list):
        return _entry(node, part, item, where)
    child = node.setdefault(part, {})
    if not isinstance(child, dict | list):
        raise OverrideError(f"override '{item}': '{part}' is not a section of the recipe")
    return child


def _entry(entries: list, name: str, item: str, where: str) -> dict:
    """The entry of a list named `name`; an index or an unknown name is refused, naming the entries."""
    names = [entry["name"] for entry in entries if isinstance(entry, dict) and isinstance(entry.get("name"), str)]
    found = [entry for entry in entries if isinstance(entry, dict) and entry.get("name") == name]
    if found:
        return found[0]
    if not names:
        raise OverrideError(
            f"override '{item}': {where} is a list whose entries have no names, so it cannot be set in part: "
            f"set it whole ({where}=[...])"
        )
    how = "lists are addressed by their entries' name, not by index" if name.lstrip("-").isdigit() else (
        f"no entry is named '{name}'{did_you_mean(name, names)}")  # fmt: skip
    example = item.replace(f"{where}.{name}", f"{where}.{names[0]}", 1)
    raise OverrideError(f"override '{item}': {how}; {where} has {', '.join(names)} (e.g. --set {example})")
