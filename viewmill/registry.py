"""Named extension points (engines, augmenters, objectives, readers, STS formats): viewmill's own entries
plus third-party ones declared as Python entry points, e.g. in a plugin's pyproject.toml:

    [project.entry-points."viewmill.engines"]
    my-engine = "my_package.engines:ENGINE"

Built-ins are "module:attribute" references too, loaded on first use, so listing names
(recipe validation, CLI help) never imports torch or a model.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator, Mapping
from functools import lru_cache
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Generic, TypeVar

from viewmill.spelling import did_you_mean

T = TypeVar("T")


class RegistryError(ValueError):
    """An unknown name, a clashing or broken plugin; the message names it and the fix."""


@lru_cache(maxsize=8)
def _plugins(group: str, search_path: tuple[str, ...]) -> dict[str, EntryPoint]:
    """Entry points of `group`, rescanned whenever sys.path changes (keyed on it)."""
    found: dict[str, EntryPoint] = {}
    for point in entry_points(group=group):
        other = found.get(point.name)
        if other is not None and other.value != point.value:
            raise RegistryError(
                f"two plugins register '{point.name}' in {group}: {other.value} and {point.value}; uninstall one"
            )
        found[point.name] = point
    return found


def _load_reference(reference: str) -> Any:
    module, _, attribute = reference.partition(":")
    value: Any = importlib.import_module(module)
    for part in attribute.split("."):
        value = getattr(value, part)
    return value


class Registry(Generic[T]):
    """Names to entries of one kind. Each loaded entry must be an instance of `entry_type`
    when given; `check`, if given, validates or converts it (e.g. a plain function to a class)."""

    def __init__(
        self, group: str, kind: str, builtins: Mapping[str, str], check: Callable[[Any], T] | None = None,
        *, entry_type: type | None = None,
    ):  # fmt: skip
        self.group, self.kind = group, kind
        self._refs: dict[str, str] = dict(builtins)
        self._loaded: dict[str, T] = {}
        self._check, self._entry_type = check, entry_type

    def _checked(self, value: Any) -> T:
        wanted = self._entry_type
        if wanted is not None and not isinstance(value, wanted):
            wanted_name = f"{wanted.__module__}.{wanted.__qualname__}"
            raise RegistryError(f"each {self.kind} entry must be a {wanted_name}, not {value!r}")
        return self._check(value) if self._check is not None else value

    def _entry_points(self) -> dict[str, EntryPoint]:
        plugins = _plugins(self.group, tuple(sys.path))
        clash = sorted(set(plugins) & set(self._refs))
        if clash:
            raise RegistryError(
                f"a plugin registers {self.kind} '{clash[0]}' ({plugins[clash[0]].value}), which viewmill already "
                f"has: rename it in the plugin's [project.entry-points.\"{self.group}\"]"
            )
        return plugins

    def builtin_names(self) -> list[str]:
        """viewmill's own names in their order (no plugin is looked for)."""
        return list(self._refs)

    def names(self) -> list[str]:
        """viewmill's own names in their order, then plugins' names sorted."""
        return self.builtin_names() + sorted(self._entry_points())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self.names()

    def get(self, name: str) -> T:
        if name in self._loaded:
            return self._loaded[name]
        plugins = self._entry_points()
        if name in self._refs:
            reference, loader = self._refs[name], _load_reference
        elif name in plugins:
            reference, loader = plugins[name].value, lambda _ref: plugins[name].load()
        else:
            raise RegistryError(self.unknown(name))
        try:
            value = loader(reference)
        except Exception as exc:
            raise RegistryError(f"{self.kind} '{name}' ({reference}) cannot be loaded: {exc}") from exc
        try:
            entry = self._checked(value)
        except RegistryError as exc:
            raise RegistryError(f"{self.kind} '{name}' ({reference}): {exc}") from None
        if name in self._refs:  # plugins are not kept: they may be uninstalled or moved on sys.path
            self._loaded[name] = entry
        return entry

    __getitem__ = get

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def help(self) -> str:
        return ", ".join(self.names())

    def unknown(self, name: str) -> str:
        """The message for a name this registry lacks: the close ones, then every one."""
        names = self.names()
        return f"unknown {self.kind} '{name}'{did_you_mean(name, names)}: use one of {', '.join(names)}"
