"""Paths a user names (corpus files, recipes, suites, model folders, the state directory) made
absolute without Python's own `RuntimeError: Symlink loop`: a symbolic link on the way that
loops, relative or absolute, through one link or several, or a link whose target is gone,
is named with the fix."""

from __future__ import annotations

import errno
import os
from pathlib import Path


class PathError(ValueError):
    """A path the user gave leads nowhere; the message names it and the fix."""


def leads_nowhere(path: Path) -> bool:
    """Whether following `path` meets a loop of symbolic links (in any of its parts), or `path`
    is itself a link whose target is gone."""
    try:
        os.stat(path)
    except OSError as exc:
        return exc.errno == errno.ELOOP or os.path.islink(path)
    return False


def nowhere(what: str, path: Path, fix: str) -> str:
    """The message for a path that `leads_nowhere`."""
    return f"{what} {path} is a symbolic link that leads nowhere (a loop, or its target is gone): {fix}"


def missing_recipe(path: Path) -> str | None:
    """What is wrong with a recipe path that names no file (None when it names one): the command
    line checks it before the recipe schema (and torch with it) loads, the recipe loader again."""
    if leads_nowhere(path):
        return nowhere("recipe", path, "name the recipe file itself")
    if not path.is_file():
        return f"recipe not found: {path} (try recipes/demo.yaml)"
    return None


def resolve_user_path(path: Path | str, what: str, fix: str) -> Path:
    """`path` absolute, its links followed; PathError (with `what` and `fix`) when it leads nowhere."""
    path = Path(path).expanduser()
    if leads_nowhere(path):
        raise PathError(nowhere(what, path, fix))
    return path.resolve()
