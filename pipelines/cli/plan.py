"""`viewmill plan`: what a recipe's run will cost, printed as a table or JSON (the numbers are
`viewmill.pipelines.plan`'s)."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table
from viewmill.pipelines.cli.common import (
    CatalogOption,
    Overrides,
    RecipeArgument,
    StateDir,
    console,
    err_console,
    fail,
    load_settings,
    require_recipe,
    user_errors,
)
from viewmill.pipelines.state import StatePaths

if TYPE_CHECKING:
    from viewmill.pipelines.plan import Plan, StageEstimate


class PlanFormat(StrEnum):
    table = "table"
    json = "json"


def plan(
    recipe: RecipeArgument,
    overrides: Overrides = None,
    state_dir: StateDir = None,
    catalog: CatalogOption = None,
    dask_workers: Annotated[
        int, typer.Option("--dask-workers", min=1, max=4096, help="Dask workers to estimate augmentation on")
    ] = 1,
    fmt: Annotated[PlanFormat, typer.Option("--format", help="table or json")] = PlanFormat.table,
    sample: Annotated[
        int, typer.Option("--sample", min=10, max=100_000, help="sentences of the corpus to measure on")
    ] = 300,
) -> None:
    """What a recipe's run will cost on this machine, before it runs: the corpus counted, every
    stage's real code timed on a sample (engines, meaning filter, training steps, encoding), the
    translation cache and views the lake already holds; per stage seconds and peak memory, here
    and on N Dask workers. Nothing is written to the lake."""
    settings = load_settings(catalog)
    state = StatePaths.resolve(state_dir)
    try:
        require_recipe(recipe)  # before torch and the recipe schema load
        from viewmill.pipelines.plan import plan_recipe
        from viewmill.pipelines.recipe import load_recipe

        parsed = load_recipe(recipe, overrides)
        err_console.print(f"planning {recipe}: measuring on up to {sample} sentences", highlight=False)
        result = plan_recipe(parsed, state, settings, sample=sample, workers=dask_workers)
    except user_errors() as exc:
        fail(exc)
    if fmt is PlanFormat.json:
        console.print(json.dumps(result.as_dict(), indent=2), highlight=False, markup=False, soft_wrap=True)
    else:
        render_plan(result)


def _size(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def _row(stage: StageEstimate, gpu: bool) -> list[str]:
    on_gpu = f"{stage.gpu_seconds:,.1f}" if stage.gpu_seconds is not None else ("=cpu" if gpu else "unmeasured")
    return [stage.stage, f"{stage.rows:,}", f"{stage.seconds:,.1f}", _size(stage.peak_rss),
            f"{stage.workers_seconds:,.1f}", _size(stage.workers_peak_rss), on_gpu]  # fmt: skip


def render_plan(result: Plan) -> None:
    from viewmill.pipelines.plan import NO_GPU

    gpu = result.gpu != NO_GPU
    console.print(
        f"recipe {result.recipe}: {result.sentences:,} sentences, {result.counted}; measured on {result.sample}",
        highlight=False, markup=False,
    )  # fmt: skip
    augmenters = Table(title="augmenters on the sample")
    for column in ("augmenter", "engine", "load s", "ms/sentence (new)", "ms/sentence (cached)",
                   "lake s/commit", "translations cached", "views present", "meaning texts/s"):  # fmt: skip
        augmenters.add_column(column)
    for a in result.augmenters:
        cached = "-" if a.cache_hits is None else f"{a.cache_hits:.0%}"
        meaning = "-" if a.meaning_texts_per_s is None else f"{a.meaning_texts_per_s:,.0f}"
        lake_s = f"{a.view_commit_s:.2f}" + (f" + {a.translation_commit_s:.2f}" if a.translation_commit_s else "")
        augmenters.add_row(a.name, a.engine, f"{a.load_s:.2f}", f"{(a.view_s + a.engine_s) * 1e3:.2f}",
                           f"{a.view_s * 1e3:.2f}", lake_s, cached, f"{a.views_present:.0%}", meaning)  # fmt: skip
    console.print(augmenters)
    stages = Table(title=f"estimate per stage (this machine, and with {result.workers} Dask worker(s))")
    for column in ("stage", "rows", "seconds", "peak memory", f"seconds on {result.workers} workers",
                   "memory on workers", "GPU seconds"):  # fmt: skip
        stages.add_column(column)
    for stage in [*result.stages, result.total]:
        stages.add_row(*_row(stage, gpu))
    console.print(stages)
    for stage in result.stages:
        console.print(f"{stage.stage}: {stage.note}", highlight=False, markup=False)
    measured = f"measured on {result.gpu}" if gpu else NO_GPU
    console.print(f"GPU figures: {measured}", highlight=False, markup=False)
    console.print(f"memory measured on {result.allocator} (docs/operations.md, the allocator)", highlight=False,
                  markup=False)  # fmt: skip
