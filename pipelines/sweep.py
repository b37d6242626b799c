"""Sweeps: several training configurations over the same pairs, compared on the recipe's
evaluation tasks, the best chosen on one (a dev set) only, or on the weighted mean of several."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from viewmill.pipelines.context import RunContext, new_run_id, recipe_parameter
from viewmill.pipelines.recipe import Recipe, RecipeError, read_recipe_file, recipe_from_mapping
from viewmill.pipelines.run import run_recipe
from viewmill.pipelines.state import StatePaths
from viewmill.pipelines.sweep_spec import SweepConfig
from viewmill.storage.ids import canonical_json
from viewmill.storage.lake import open_lake
from viewmill.storage.schema import SWEEPS
from viewmill.train.dev_scores import weighted_mean
from viewmill.train.evaluation.suite import bar_chart

from viewmill.settings import Settings

START = "start"  # the untrained encoder's row


@dataclass
class SweepResult:
    label: str
    overrides: dict[str, Any]
    snapshot: str
    model_id: str
    results: dict[str, float]
    start: dict[str, float]  # the configuration's untrained encoder on the same tasks
    train_config: str = ""
    selected: bool = False


@dataclass
class SweepReport:
    sweep: str
    sweep_run: str
    select_on: str  # the selection task's name, or the label of several tasks' (weighted) mean
    tasks: list[str]
    results: list[SweepResult] = field(default_factory=list)
    markdown: str = ""
    markdown_path: Path | None = None
    plot_path: Path | None = None
    select_weights: dict[str, float] = field(default_factory=dict)  # each selection task's weight

    def __post_init__(self) -> None:
        self.select_weights = self.select_weights or {self.select_on: 1.0}  # one task, named by select_on

    @property
    def selected(self) -> SweepResult:
        return next(r for r in self.results if r.selected)

    def select_value(self, values: dict[str, float]) -> float:
        """The selection score of one configuration's (or the start's) figures."""
        return weighted_mean(values, self.select_weights)

    def as_dict(self) -> dict[str, Any]:
        return {
            "sweep": self.sweep,
            "sweep_run": self.sweep_run,
            "select_on": self.select_on,
            "select_weights": self.select_weights,
            "selected": self.selected.label,
            "results": [{"label": r.label, "model_id": r.model_id, **r.results} for r in self.results],
            "markdown_path": str(self.markdown_path),
            "plot_path": str(self.plot_path),
        }


@dataclass(frozen=True)
class SweepRecipes:
    """A sweep's recipes, all validated before any runs: the base recipe, then one per
    configuration, in the order of `base.sweep.expand()`."""

    base: Recipe
    configs: list[Recipe]

    def as_parameter(self) -> list[dict[str, Any]]:
        """JSON for a flow parameter: the base, then the configurations (`recipe_parameter`)."""
        return [recipe_parameter(recipe) for recipe in (self.base, *self.configs)]

    @classmethod
    def from_parameter(cls, recipes: list[dict[str, Any]]) -> SweepRecipes:
        base, *configs = (Recipe.model_validate(recipe) for recipe in recipes)
        return cls(base, configs)


def load_sweep(recipe_path: Path | str, overrides: list[str] | None = None) -> SweepRecipes:
    """The sweep's recipes, from one read of the recipe file."""
    overrides = list(overrides or [])
    raw = read_recipe_file(recipe_path)
    base = recipe_from_mapping(raw, recipe_path, overrides)
    if base.sweep is None:
        raise RecipeError(f"recipe {recipe_path} has no sweep section: add sweep.grid or sweep.configs")
    configs = [recipe_from_mapping(raw, recipe_path, overrides + c.overrides()) for c in base.sweep.expand()]
    return SweepRecipes(base, configs)


def run_sweep(
    recipe: Path | str | SweepRecipes,
    state: StatePaths,
    overrides: list[str] | None = None,
    *,
    run: Callable[[RunContext], dict[str, Any]] | None = None,
    out: Path | None = None,
    settings: Settings | None = None,
    sweep_run: str | None = None,
) -> SweepReport:
    """Run every configuration of the recipe's sweep (each a full recipe run: data already in
    the lake is reused, so configurations that keep the pairing share one pairs snapshot),
    record each in the lake's `sweeps` table with its settings, choose the best on
    `select_on`, and write a Markdown table and a PNG chart.

    `recipe`: the recipe file (read with `overrides`), or its recipes as the caller loaded
    them (`load_sweep`). `run` runs one configuration's recipe (Prefect passes one that makes
    each stage a task). `sweep_run` names the sweep (default: a new run id; Prefect's, its flow run's).
    """
    recipes = recipe if isinstance(recipe, SweepRecipes) else load_sweep(recipe, overrides)
    base = recipes.base
    spec = base.sweep
    assert spec is not None  # load_sweep refuses a recipe without one
    run = run or run_recipe
    tasks = [t.name for t in base.evaluate.tasks]
    sweep_run = sweep_run or new_run_id()
    report = SweepReport(base.name, sweep_run, spec.select_label, tasks, select_weights=spec.select_weights)
    configs = spec.expand()
    for config, configured in zip(configs, recipes.configs, strict=True):
        summary = run(RunContext(configured, state, settings or Settings()))
        report.results.append(_result(config, summary, configured.train.model_dump_json(exclude={"dev"})))
    best = max(report.results, key=lambda r: report.select_value(r.results))  # the first of equals
    best.selected = True
    _record(state, report, settings or Settings())
    report.markdown = comparison_table(report)
    folder = out or state.root / "reports"
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"sweep-{report.sweep}-{report.sweep_run}"
    report.markdown_path = folder / f"{stem}.md"
    report.markdown_path.write_text(f"# viewmill sweep {report.sweep} ({report.sweep_run})\n\n{report.markdown}")
    rows = [{"model": START, "task": t, "value": v} for t, v in report.results[0].start.items()]
    rows += [{"model": r.label, "task": t, "value": v} for r in report.results for t, v in r.results.items()]
    report.plot_path = bar_chart(rows, report.tasks, folder / f"{stem}.png")
    return report


def _result(config: SweepConfig, summary: dict[str, Any], train_config: str) -> SweepResult:
    by_model: dict[str, dict[str, float]] = {}
    for row in summary["evals"]:
        by_model.setdefault(row["model"], {})[row["task"]] = row["value"]
    return SweepResult(
        label=config.label,
        overrides=config.set,
        snapshot=summary["snapshot"]["name"],
        model_id=summary["train"]["model_id"],
        results=by_model["trained"],
        start=by_model.get("untrained", {}),
        train_config=train_config,
    )


def _record(state: StatePaths, report: SweepReport, settings: Settings) -> None:
    now = datetime.now(UTC)
    rows = [
        {
            "sweep": report.sweep,
            "sweep_run": report.sweep_run,
            "label": r.label,
            "overrides": canonical_json(r.overrides),
            "train_config": r.train_config,
            "snapshot": r.snapshot,
            "model_id": r.model_id,
            "select_task": report.select_on,
            "select_value": report.select_value(r.results),
            "results": canonical_json(r.results),
            "selected": r.selected,
            "created_at": now,
        }
        for r in report.results
    ]
    with open_lake(settings, state.lake) as lake, lake.transaction():
        lake.append("sweeps", pa.Table.from_pylist(rows, schema=SWEEPS))


def comparison_table(report: SweepReport) -> str:
    """Configurations as rows: the selection task(s) first (several: then their selection
    score), then the others and their mean, with the untrained start on top and the selected
    configuration marked."""
    chosen = list(report.select_weights)
    others = [t for t in report.tasks if t not in chosen]
    selects = [f"{chosen[0]} (selects)"] if len(chosen) == 1 else [*chosen, f"{report.select_on} (selects)"]
    header = ["configuration", "settings", *selects, *others, "mean of others", "vs start"]
    lines = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    start = report.results[0].start
    start_mean = float(np.mean([start[t] for t in others])) if others and start else None

    def cells(values: dict[str, float]) -> list[str]:
        score = [] if len(chosen) == 1 else [report.select_value(values)]
        return [f"{v:.2f}" for v in [*(values[t] for t in chosen), *score, *(values[t] for t in others)]]

    if start:
        mean = f"{start_mean:.2f}" if start_mean is not None else "-"
        lines.append(f"| {START} (untrained) | - | " + " | ".join(cells(start)) + f" | {mean} | - |")
    for r in report.results:
        mean = float(np.mean([r.results[t] for t in others])) if others else None
        delta = f"{mean - start_mean:+.2f}" if mean is not None and start_mean is not None else "-"
        name = f"**{r.label}** (selected)" if r.selected else r.label
        settings = ", ".join(f"{k}={json.dumps(v)}" for k, v in r.overrides.items()) or "(recipe)"
        mean_cell = f"{mean:.2f}" if mean is not None else "-"
        lines.append(f"| {name} | {settings} | " + " | ".join(cells(r.results)) + f" | {mean_cell} | {delta} |")
    return "\n".join(lines) + "\n"
