"""pydantic's validation errors as people read them: one line per problem, its place in the file
(`train.objective`), the message viewmill wrote without pydantic's "Value error," prefix, and a
"did you mean" for a mistyped key."""

from __future__ import annotations

import typing
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from viewmill.spelling import did_you_mean

_PREFIXES = ("Value error, ", "Assertion failed, ")


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models a field's annotation can hold (X | None, list[X], Annotated[X, ...])."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in typing.get_args(annotation) for model in _models_in(arg)]


def _subclasses(model: type[BaseModel]) -> list[type[BaseModel]]:
    return [model] + [sub for child in model.__subclasses__() for sub in _subclasses(child)]


def _step(models: list[type[BaseModel]], part: str) -> list[type[BaseModel]]:
    """The models one key further down: the field's models, or for a tagged union's tag
    (augmenters.0.synonym) the member whose `method` it is."""
    fields = [model.model_fields[part] for model in models if part in model.model_fields]
    inner = [m for field in fields for m in _models_in(field.annotation)]
    if inner:
        return inner
    return [sub for model in models for sub in _subclasses(model)
            if "method" in sub.model_fields and sub.model_fields["method"].default == part]  # fmt: skip


def known_keys(root: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """The keys allowed beside the last element of `loc` (empty when the path cannot be followed)."""
    models = [root]
    for part in loc[:-1]:
        if isinstance(part, str):
            models = _step(models, part)
    return sorted({name for model in models for name in model.model_fields})


def _rules(field: FieldInfo) -> list[Any]:
    """A field's constraints, its items' too (tuple[Annotated[int, Field(le=...)], ...])."""
    found = list(field.metadata)
    pending = list(typing.get_args(field.annotation))
    while pending:
        arg = pending.pop()
        if isinstance(arg, FieldInfo):
            found += arg.metadata
        else:
            pending += typing.get_args(arg)
    return found


def _bounds(root: type[BaseModel], loc: tuple[int | str, ...]) -> str:
    """The bounds of the field at `loc` (an item of it: its last name) in words ("at least 1 and
    at most 10000000"), or "" when the path cannot be followed."""
    names = [part for part in loc if isinstance(part, str)]
    models = [root]
    for part in names[:-1]:
        models = _step(models, part)
    fields = [model.model_fields[names[-1]] for model in models if names and names[-1] in model.model_fields]
    words = {"ge": "at least", "gt": "above", "le": "at most", "lt": "below"}
    found = [f"{words[key]} {getattr(rule, key)}" for field in fields[:1] for rule in _rules(field)
             for key in words if hasattr(rule, key)]  # fmt: skip
    return " and ".join(found)


def problem(item: Any, root: type[BaseModel] | None = None) -> str:
    """One error of a ValidationError: what is wrong, in words."""
    kind, message = item["type"], item["msg"]
    if kind == "extra_forbidden":
        key = str(item["loc"][-1]) if item["loc"] else ""
        hint = did_you_mean(key, known_keys(root, item["loc"])) if root is not None else ""
        return f"unknown field{hint}; remove it or fix its spelling"
    if kind == "missing":
        return "required field is missing; add it"
    if kind == "finite_number":  # inf, nan, or a number beyond a float's range (1e400)
        return f"{item['input']} is not a finite number: give a number (inf, nan and 1e400 are refused)"
    if kind == "int_parsing_size":  # beyond 64 bits: say the field's own bound
        limits = _bounds(root, item["loc"]) if root is not None else ""
        return f"{item['input']} is far too large{f': {limits}' if limits else ''}"
    for prefix in _PREFIXES:
        message = message.removeprefix(prefix)
    return message


def validation_lines(error: ValidationError, root: type[BaseModel] | None = None) -> list[str]:
    """'  - place: problem' for each error; `root` (the model validated) lets unknown keys get a
    'did you mean'."""
    lines = []
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"]) or "(top level)"
        lines.append(f"  - {where}: {problem(item, root)}")
    return lines
