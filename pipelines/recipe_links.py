"""The recipes a recipe names, loaded with it: `train.start_from` (the recipe whose trained model
this training continues) and `soup.recipes` (the recipes whose models go into the soup).

Each is a file from the naming recipe's folder, loaded as a flow parameter carries it (a
mapping), and refused before anything runs where it could not play its part. The loader is
passed in (recipe.py's `recipe_from_mapping`), so this module needs nothing of recipe.py."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any


class RecipeError(ValueError):
    """A recipe is unusable; the message names the field or file and the fix."""


Loader = Callable[[dict, Path], Any]  # a raw mapping and its file -> the validated recipe
Reader = Callable[[Path], dict]  # a recipe file -> its raw mapping

# The recipe files being loaded, outermost first: naming one of them again would never end.
_LOADING: ContextVar[tuple[Path, ...]] = ContextVar("viewmill_recipes_loading", default=())


@contextmanager
def loading(path: Path) -> Iterator[None]:
    """While `path` loads, a recipe it names that names it back is refused."""
    token = _LOADING.set((*_LOADING.get(), path.resolve()))
    try:
        yield
    finally:
        _LOADING.reset(token)


def _named(path: Path, field: str, read: Reader, load: Loader) -> Any:
    """The recipe file `field` names, loaded; a file already being loaded is refused."""
    if path.resolve() in _LOADING.get():
        chain = " -> ".join(p.name for p in (*_LOADING.get(), path))
        raise RecipeError(f"{field} names {path}, which names it back ({chain}): recipes cannot name each other round")
    return load(read(path), path)


def start_recipe(recipe: Any, path: Path, read: Reader, load: Loader) -> dict:
    """`train.start_from`, loaded: a recipe that trains one model from the same `train.encoder`
    (the start a schedule's gains are measured against), neither a soup nor a sweep."""
    entry = recipe.train.start_from
    if not isinstance(entry, str):
        kind = type(entry).__name__
        raise RecipeError(f"train.start_from takes a recipe file (a path from the recipe's folder), not a {kind}")
    file = path.resolve().parent / entry
    where = f"train.start_from names {file}"
    raw = read(file)
    if "soup" in raw or "sweep" in raw:
        kind = "a soup" if "soup" in raw else "a sweep"
        raise RecipeError(
            f"{where}, {kind}: its run ends in more than the one trained model a schedule continues; name the recipe "
            "whose model to continue"
        )
    named = _named(file, "train.start_from", lambda _: raw, load)
    why = "the stages of a schedule share one start, the baseline its gains are measured against"
    return _trains_from_the_same_start(named, recipe, where, why)


def soup_ingredients(recipe: Any, path: Path, read: Reader, load: Loader) -> list[dict]:
    """`soup.recipes`, files from the recipe's folder, each named once and never the recipe itself."""
    entries = recipe.soup.recipes
    odd = next((entry for entry in entries if not isinstance(entry, str)), None)
    if odd is not None:
        raise RecipeError(
            f"soup.recipes takes recipe files (paths from the recipe's folder), not a {type(odd).__name__}"
        )
    files = [path.resolve().parent / entry for entry in entries]  # loaded as named; compared resolved
    resolved = [file.resolve() for file in files]
    if len(set(resolved)) != len(resolved) or path.resolve() in resolved:
        raise RecipeError(f"recipe {path}: soup.recipes names a recipe twice, or this recipe: name each other once")
    return [_soup_ingredient(recipe, file, read, load) for file in files]


def _soup_ingredient(recipe: Any, path: Path, read: Reader, load: Loader) -> dict:
    """One `soup.recipes` file, loaded; one that cannot share the soup's start is refused before anything runs."""
    raw = read(path)
    where = f"soup.recipes names {path}"
    if "soup" in raw:  # before loading it: a soup naming itself would never end
        raise RecipeError(f"{where}, itself a soup: name the recipes of its soup.recipes here instead")
    ingredient = _named(path, "soup.recipes", lambda _: raw, load)
    return _trains_from_the_same_start(ingredient, recipe, where, "a soup averages fine-tunes of one start")


def _trains_from_the_same_start(named: Any, recipe: Any, where: str, why: str) -> dict:
    """`named` as a flow parameter carries it, once it is known to train from `recipe`'s encoder."""
    if named.train is None:
        raise RecipeError(f"{where}, which trains nothing (no train section): name a recipe that trains a model")
    if named.train.encoder != recipe.train.encoder:
        raise RecipeError(
            f"{where}, which starts from {named.train.encoder}, not {recipe.train.encoder}: {why}; set the same "
            "train.encoder in both"
        )
    return named.model_dump(mode="json", exclude_unset=True)
