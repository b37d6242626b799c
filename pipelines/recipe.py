"""Recipes: one validated YAML file describing a run from corpus to evaluation."""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    BaseModel,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)
from viewmill.augment.augmenters import AugmenterSpec
from viewmill.augment.ingest.readers import READERS, nli_formats
from viewmill.augment.quality import FilterSpec
from viewmill.pipelines.messages import validation_lines
from viewmill.pipelines.overrides import OverrideError
from viewmill.pipelines.overrides import apply_overrides as overrides_applied
from viewmill.pipelines.recipe_links import RecipeError, loading, soup_ingredients, start_recipe
from viewmill.pipelines.recipe_sections import CorpusSpec, ExecutionSpec, PairSpec, SoupSpec
from viewmill.pipelines.safe_yaml import YamlTooLarge, load_yaml
from viewmill.pipelines.sweep_spec import SweepSpec
from viewmill.storage.datasets import fetching
from viewmill.storage.ids import canonical_json, fingerprint
from viewmill.storage.negatives import NLI_SOURCE
from viewmill.train.config import TrainConfig
from viewmill.train.evaluation.senteval import TransferTask
from viewmill.train.evaluation.sts import StsTask
from viewmill.train.evaluation.suite import EvalTask, standard_suites
from viewmill.train.mining import MinedNegatives

from viewmill.paths import leads_nowhere, missing_recipe, nowhere
from viewmill.specs import Spec
from viewmill.spelling import did_you_mean

DEFAULT_EVAL_EVERY = 20


class DevTask(StsTask):
    """A dev task of model selection: an STS task and its weight in the selection score."""

    weight: float = Field(1.0, gt=0, le=1e6, description="the task's weight in the dev tasks' weighted mean")


class TrainSpec(TrainConfig):
    encoder: str = "embedded:all-MiniLM-L6-v2"
    start_from: str | dict[str, Any] | None = Field(
        None,
        description="a recipe file (from this recipe's folder) whose trained model this training continues, a "
        "schedule in stages: it runs first where the lake lacks its model, from the same train.encoder (the "
        "start both are measured against)",
    )
    dev: DevTask | list[DevTask] | None = Field(
        None, description="STS data scored every eval_every steps (model selection): one task, or a list"
    )

    @model_serializer(mode="wrap")
    def _without_a_start(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Recipe hashes and manifests from before `start_from` existed stay as they were.
        dumped = handler(self)
        if dumped.get("start_from") is None:
            dumped.pop("start_from", None)
        return dumped

    @field_validator("dev", mode="before")
    @classmethod
    def _sts_tasks_weigh_one(cls, dev: Any) -> Any:
        # An StsTask built in code, rather than read from a recipe, is a dev task of weight 1.
        def lift(task: Any) -> Any:
            return DevTask(**task.model_dump()) if isinstance(task, StsTask) and not isinstance(task, DevTask) else task

        return [lift(task) for task in dev] if isinstance(dev, list) else lift(dev)

    @property
    def continues_a_model(self) -> bool:
        """Training begins at a `start_from` recipe's model, not at `encoder`: its step 0 is not the start."""
        return self.start_from is not None

    @property
    def dev_tasks(self) -> list[DevTask]:
        return [] if self.dev is None else [self.dev] if isinstance(self.dev, DevTask) else list(self.dev)

    @model_validator(mode="after")
    def _evaluate_dev_by_default(self) -> TrainSpec:
        names = [task.name for task in self.dev_tasks]
        if isinstance(self.dev, list) and not names:
            raise ValueError("dev is an empty list: name at least one dev task, or remove dev")
        if len(set(names)) != len(names):
            raise ValueError(f"dev task names must be unique (each has its own scores), got {names}")
        if "selection" in self.model_fields_set and not names:
            raise ValueError("selection chooses among dev evaluations: set train.dev (one task or a list)")
        # Safe post-training: with dev data, score it every 20 steps and export the best
        # state (the start included), unless told otherwise.
        if names and self.preset == "safe" and "eval_every" not in self.model_fields_set:
            self.eval_every = min(DEFAULT_EVAL_EVERY, self.steps)
        return self


class EvaluateSpec(Spec):
    tasks: list[EvalTask] = Field(description="the tasks; [] evaluates nothing (as `viewmill run --no-eval`)")
    baseline: bool = True
    batch_size: int = Field(64, ge=1, le=65536)


# Files and folders are named after the recipe (models/<name>-<id>.staged.partial-old-<pid>,
# reports/sweep-<name>-<run>.md): with at most 100 characters these stay under the 255 bytes
# a file name may have, instead of failing after augmenting.
MAX_NAME_CHARS = 100


class Recipe(Spec):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    corpus: CorpusSpec
    augmenters: list[AugmenterSpec] = Field(min_length=1)
    filters: FilterSpec = FilterSpec()
    pair: PairSpec
    train: TrainSpec | None = None
    evaluate: EvaluateSpec | None = None
    execution: ExecutionSpec = ExecutionSpec()
    sweep: SweepSpec | None = None
    soup: SoupSpec | None = None

    @field_validator("name")
    @classmethod
    def _name_fits_a_file_name(cls, name: str) -> str:
        if len(name) > MAX_NAME_CHARS:
            raise ValueError(
                f"the name is {len(name)} characters long, more than {MAX_NAME_CHARS}: viewmill names files after "
                f"it (models/<name>-<model id>, reports/sweep-<name>-<run>.md) and a file name may have at most "
                f"255 bytes; shorten the name"
            )
        return name

    @model_validator(mode="after")
    def _references(self) -> Recipe:
        names = [a.name for a in self.augmenters]
        if len(set(names)) != len(names):
            raise ValueError(f"augmenter names must be unique, got {names}")
        for a, b in self.pair.pairs:
            for side, name in (("view_a", a), ("view_b", b)):
                if name not in names:
                    raise ValueError(f"pair.{side} '{name}' is not an augmenter name ({', '.join(names)})")
            if a == b:
                raise ValueError(f"pair.view_a and pair.view_b must name different augmenters ({a} with itself)")
        if self.sweep is not None:
            tasks = [t.name for t in self.evaluate.tasks] if self.evaluate is not None else []
            unknown = [name for name in self.sweep.select_weights if name not in tasks]
            if self.train is None or unknown:
                raise ValueError(
                    f"sweep.select_on '{', '.join(unknown) or self.sweep.select_label}' must name an evaluate task "
                    f"({', '.join(tasks) or 'none'}) and the recipe needs a train section"
                )
        if self.soup is not None and (self.train is None or not self.train.dev_tasks or self.sweep is not None):
            raise ValueError(
                "soup chooses its mix on the recipe's dev tasks: it needs a train section with train.dev, and no sweep"
            )
        if self.wants_nli_links and not READERS[self.corpus.format].yields_nli_pairs:
            needing = [a.method for a in self.augmenters if a.needs_nli_links]
            needs = f"the {needing[0]} augmenter" if needing else "pair.negatives (nli-contradiction)"
            raise ValueError(
                f"{needs} needs labelled NLI data: corpus.format is '{self.corpus.format}', "
                f"use one of {', '.join(nli_formats())}"
            )
        return self

    def eval_tasks(self) -> list[StsTask | TransferTask]:
        """Every evaluation the recipe reads: the evaluation tasks and the training dev set."""
        tasks = list(self.evaluate.tasks) if self.evaluate is not None else []
        if self.train is not None:
            tasks += self.train.dev_tasks
        return tasks

    def start_recipe(self) -> Recipe | None:
        """The recipe whose model this training continues (`train.start_from`), as loaded."""
        start = self.train.start_from if self.train is not None else None
        if start is None:
            return None
        if not isinstance(start, dict):
            raise RecipeError(f"train.start_from {start!r} was never loaded: read the recipe with load_recipe")
        return Recipe.model_validate(start)

    def named_recipes(self) -> list[Recipe]:
        """Every recipe this one runs besides itself: its start first, then its soup's."""
        start = self.start_recipe()
        return [*([start] if start is not None else []), *self.soup_recipes()]

    def soup_recipes(self) -> list[Recipe]:
        """The recipes whose models go into the soup, as loaded (their paths resolved)."""
        if self.soup is None:
            return []
        unloaded = [entry for entry in self.soup.recipes if not isinstance(entry, dict)]
        if unloaded:
            raise RecipeError(f"soup.recipes {unloaded[0]!r} was never loaded: read the recipe with load_recipe")
        return [Recipe.model_validate(entry) for entry in self.soup.recipes]

    @property
    def wants_nli_links(self) -> bool:
        negatives = self.pair.negatives
        return any(a.needs_nli_links for a in self.augmenters) or (
            negatives is not None and negatives.source == NLI_SOURCE
        )

    @property
    def corpus_name(self) -> str:
        return self.corpus.name or self.name

    def augmenter(self, name: str) -> AugmenterSpec:
        return next(a for a in self.augmenters if a.name == name)

    def content_hash(self) -> str:
        return fingerprint(self.model_dump(mode="json"))

    def as_json(self) -> str:
        return canonical_json(self.model_dump(mode="json"))


def _format_validation_error(path: Path, error: ValidationError, root: type[BaseModel] | None = None) -> str:
    return "\n".join([f"recipe {path} is not valid:", *validation_lines(error, root or Recipe)])


def suite_file(suite: Path | str) -> Path:
    """A standard suite's file by its name (`papers`, `multilingual`: shipped with viewmill), or
    a suite file, a relative path taken from the working directory."""
    standard = standard_suites()
    if str(suite) in standard:
        return standard[str(suite)]
    path = Path(suite).expanduser()
    if leads_nowhere(path):
        raise RecipeError(nowhere("evaluation suite", path, "name the suite file itself"))
    if path.is_file():
        return path
    names = ", ".join(standard)
    hint = did_you_mean(str(suite), list(standard)) if path.suffix == "" and len(path.parts) == 1 else ""
    where = "" if path.is_absolute() else f" (from the working directory {Path.cwd()})"
    raise RecipeError(
        f"evaluation suite not found: {suite}{where}{hint}: name a standard suite ({names}) or a suite file"
    )


def load_suite(suite: Path | str) -> EvaluateSpec:
    """An evaluation suite: a standard one by name, or a file (`suite_file`) holding the
    `evaluate:` section of a recipe on its own (tasks, batch_size); task paths are taken from
    the file's folder."""
    path = suite_file(suite)
    try:
        raw = load_yaml(path.read_text(encoding="utf-8"))
        suite = EvaluateSpec.model_validate(raw)
    except yaml.YAMLError as exc:
        raise RecipeError(f"suite {path} is not valid YAML: {exc}") from None
    except YamlTooLarge as exc:
        raise RecipeError(f"suite {path}: {exc}") from None
    except ValidationError as exc:
        raise RecipeError(_format_validation_error(path, exc, EvaluateSpec).replace("recipe", "suite", 1)) from None
    if not suite.tasks:
        raise RecipeError(f"suite {path} has no tasks: name at least one under tasks:")
    base = path.resolve().parent
    for task in suite.tasks:
        _resolve_task_paths(task, base)
    return suite


def _resolve_path(path: Path, base: Path, field: str = "evaluate.tasks") -> Path:
    """`data:<folder>/<file>` names a file of a fetched data set (viewmill data list); any
    other relative path is taken from the recipe's folder. A symbolic link that leads nowhere
    is refused, named as the recipe's `field`."""
    if fetching.is_reference(path):
        return fetching.resolve(path)
    joined = base / path  # an absolute path stays itself
    if leads_nowhere(joined):
        what = "corpus file" if field == "corpus.files" else f"{field} path"
        raise RecipeError(nowhere(what, joined, f"point {field} at the real file"))
    return path if path.is_absolute() else joined.resolve()


def _resolve_task_paths(task: StsTask | TransferTask, base: Path) -> None:
    task.path = _resolve_path(task.path, base)
    gold = getattr(task, "gold_path", None)
    if gold is not None:
        task.gold_path = _resolve_path(gold, base)


def _model_beside(base: Path, ref: str, field: str) -> str:
    """A model folder named from the recipe's folder, made absolute; any other reference
    (embedded:NAME, a hub id) as written."""
    if ref.startswith("embedded:"):
        return ref
    candidate = base / ref
    if leads_nowhere(candidate):
        raise RecipeError(nowhere(f"{field}", candidate, f"point {field} at the model folder itself"))
    return str(candidate.resolve()) if candidate.exists() else ref


def apply_overrides(raw: dict, overrides: list[str]) -> dict:
    """`train.objective=ntxent`-style settings (values parsed as YAML) applied to a raw recipe
    (`augmenters.bt_es.engine=hf`: a list's entry by its name)."""
    try:
        return overrides_applied(raw, overrides)
    except OverrideError as exc:
        raise RecipeError(str(exc)) from None


def load_recipe(path: Path | str, overrides: list[str] | None = None) -> Recipe:
    """Parse and validate a recipe; relative file paths are taken from the recipe's folder."""
    return recipe_from_mapping(read_recipe_file(path), path, overrides)


def read_recipe_file(path: Path | str) -> dict:
    """A recipe file's YAML mapping, not yet validated (a sweep validates it once per configuration)."""
    path = Path(path)
    problem = missing_recipe(path)
    if problem:
        raise RecipeError(problem)
    try:
        raw = load_yaml(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise RecipeError(f"recipe {path} is not valid YAML: {exc}") from None
    except YamlTooLarge as exc:
        raise RecipeError(f"recipe {path}: {exc}") from None
    except UnicodeDecodeError:
        raise RecipeError(f"recipe {path} is not UTF-8 text") from None
    if not isinstance(raw, dict):
        raise RecipeError(f"recipe {path} must be a YAML mapping with name, corpus, augmenters, pair")
    return raw


def recipe_from_mapping(raw: dict, path: Path | str, overrides: list[str] | None = None) -> Recipe:
    """`raw` (read from `path`, left unchanged) with `overrides` applied, validated, and its
    relative file paths taken from the recipe's folder."""
    path = Path(path)
    raw = apply_overrides(copy.deepcopy(raw), overrides or [])
    try:
        recipe = Recipe.model_validate(raw)
    except ValidationError as exc:
        raise RecipeError(_format_validation_error(path, exc)) from None
    base = path.resolve().parent
    takes_names = not READERS[recipe.corpus.format].reads_files
    recipe.corpus.files = [
        f
        if takes_names and not fetching.is_reference(f) and not os.path.lexists(base / f)
        else _resolve_path(f, base, "corpus.files")
        for f in recipe.corpus.files
    ]  # a reader of names (hf: hub ids) gets a source that is no path beside the recipe as written
    for task in recipe.eval_tasks():
        _resolve_task_paths(task, base)
    if recipe.train is not None:
        recipe.train.encoder = _model_beside(base, recipe.train.encoder, "train.encoder")
    negatives = recipe.pair.negatives
    if isinstance(negatives, MinedNegatives):
        negatives.encoder = _model_beside(base, negatives.encoder, "pair.negatives.encoder")
    meaning = recipe.filters.meaning
    if meaning is not None:
        meaning.encoder = _model_beside(base, meaning.encoder, "filters.meaning.encoder")
    with loading(path):
        if recipe.train is not None and recipe.train.start_from is not None:
            recipe.train.start_from = start_recipe(recipe, path, read_recipe_file, recipe_from_mapping)
        if recipe.soup is not None:
            recipe.soup.recipes = soup_ingredients(recipe, path, read_recipe_file, recipe_from_mapping)
    return recipe
