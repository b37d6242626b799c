"""`viewmill run | train | sweep | serve`: the commands that run a recipe (through Prefect
unless --no-prefect) or serve its deployments; registered on the app by `viewmill.pipelines.cli.app`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from viewmill.pipelines.cli.common import (
    DEBUG_ENV,
    EXIT_FAILED,
    CatalogOption,
    DaskOption,
    Overrides,
    PrefectOption,
    RecipeArgument,
    StateDir,
    UsageError,
    catalog_spec,
    console,
    err_console,
    fail,
    load_settings,
    require_recipe,
    user_errors,
)
from viewmill.pipelines.cli.snapshot_names import refuse_snapshot_early
from viewmill.pipelines.orchestration.prefect_env import PrefectServerError
from viewmill.pipelines.state import StatePaths

if TYPE_CHECKING:
    from viewmill.pipelines.context import RunContext
    from viewmill.pipelines.recipe import Recipe
    from viewmill.pipelines.run_record import RunSummary

    from viewmill.settings import Settings

# The recipe schema (and through it torch) loads when a command runs, not when the CLI starts;
# what the arguments name is checked before it does (`_check_arguments`): usage errors come at once.


def _check_arguments(recipe: Path, dask: str | None, prefect: bool) -> None:
    """The recipe file exists and --dask comes with Prefect: checked before the recipe schema
    (and torch) loads, so these mistakes are named in a fraction of a second."""
    require_recipe(recipe)
    if dask and not prefect:
        raise UsageError("--dask runs shards as Prefect tasks: drop --no-prefect, or drop --dask")


def _flow(name: str, state: StatePaths):
    """One of viewmill's flows, with Prefect pointed at a server (the user's, checked first,
    else the state directory's temporary one). Where its shards run comes with its settings."""
    from viewmill.pipelines.orchestration.prefect_env import connect_prefect

    err_console.print(connect_prefect(state), highlight=False)
    from viewmill.pipelines.orchestration import flows

    return getattr(flows, name)


def run(
    recipe: RecipeArgument,
    state_dir: StateDir = None,
    catalog: CatalogOption = None,
    overrides: Overrides = None,
    prefect: PrefectOption = True,
    dask: DaskOption = None,
    evaluate: Annotated[
        bool, typer.Option("--eval/--no-eval", help="evaluate the trained model on the recipe's evaluate tasks")
    ] = True,
) -> None:
    """Run a recipe end to end: ingest, augment, pair, train, evaluate (--no-eval: stop after training)."""
    _run(recipe, state_dir, catalog, overrides, prefect, dask, snapshot=None, evaluate=evaluate, needs_train=False)


def train(
    recipe: Annotated[Path, typer.Argument(help="recipe YAML with a train section")],
    snapshot: Annotated[
        str | None, typer.Option(help="train on this existing pairs snapshot instead of making the recipe's pairs")
    ] = None,
    state_dir: StateDir = None,
    catalog: CatalogOption = None,
    overrides: Overrides = None,
    prefect: PrefectOption = True,
    dask: DaskOption = None,
) -> None:
    """Train the recipe's encoder (no evaluation); the model is recorded in the lake with its lineage."""
    _run(recipe, state_dir, catalog, overrides, prefect, dask, snapshot=snapshot, evaluate=False, needs_train=True)


def _run(
    recipe: Path,
    state_dir,
    catalog,
    overrides,
    prefect: bool,
    dask: str | None,
    *,
    snapshot: str | None,
    evaluate: bool,
    needs_train: bool,
) -> None:
    _check_arguments(recipe, dask, prefect)  # a usage error ends as one message, exit 2 (app.py)
    state = StatePaths.resolve(state_dir)
    if snapshot is not None:  # no lake, or none of its snapshots: named before pydantic-settings loads
        refuse_snapshot_early(state.lake, snapshot, catalog_spec(catalog), data_path=None)
    settings = load_settings(catalog, dask)
    if snapshot is not None:  # the snapshot named exists, before the recipe loads
        from viewmill.storage.lake import open_lake
        from viewmill.storage.snapshots import snapshot_info

        with open_lake(settings, state.lake, read_only=True) as lake:
            snapshot_info(lake, snapshot)
    from viewmill.augment.ingest.readers import CorpusError
    from viewmill.pipelines.cli.report import render_summary

    ctx = _checked_context(recipe, overrides, state, settings, snapshot=snapshot, needs_train=needs_train)
    err_console.print(f"run {ctx.run_id}: recipe {recipe}", highlight=False)
    note = named_override_note(ctx.recipe, overrides)
    if note is not None:
        err_console.print(note, highlight=False)
    try:  # from here on a failure is a failed run (recorded in `runs`), bar the corpus errors ingest finds
        summary = _run_checked(ctx, recipe, prefect=prefect, snapshot=snapshot, evaluate=evaluate)
    except (PrefectServerError, CorpusError) as exc:  # a corpus error ingest met: bad input (the run recorded failed)
        fail(exc)
    except Exception as exc:
        if os.environ.get(DEBUG_ENV):
            raise
        fail(exc, EXIT_FAILED)
    render_summary(summary, console)


def named_override_note(recipe: Recipe, overrides: list[str] | None) -> str | None:
    """The recipes a recipe names (its start_from, its soup's) run as their files say: `--set`
    (a GPU, a step budget) reaches only the recipe it came with, which a user might not expect."""
    named = recipe.named_recipes()
    if not overrides or not named:
        return None
    return (
        f"note: --set applies to recipe {recipe.name} only; the recipes it names "
        f"({', '.join(r.name for r in named)}) run as their files say: set them there"
    )


def _checked_context(
    recipe: Path, overrides, state: StatePaths, settings: Settings, *, snapshot: str | None, needs_train: bool
) -> RunContext:
    """The run's context once its recipe is parsed and checked: preflight for a full run, the
    snapshot and the lake's files for training on an existing snapshot. Bad input ends here."""
    from viewmill.pipelines.context import RunContext
    from viewmill.pipelines.recipe import RecipeError, load_recipe
    from viewmill.pipelines.stages.pair import existing_snapshot
    from viewmill.pipelines.stages.preflight import check_lake_files, preflight

    try:
        parsed = load_recipe(recipe, overrides)  # the run's one parse: a flow gets this recipe, not the file
        if needs_train and parsed.train is None:
            raise RecipeError(f"recipe {recipe} has no train section: add one (see recipes/demo.yaml)")
        ctx = RunContext(parsed, state, settings)
        if snapshot is None:
            preflight(ctx)  # fail fast, before Prefect starts or the lake is written
        else:
            check_lake_files(ctx)  # a catalog restored older than its data: refused before its first read
            existing_snapshot(ctx, snapshot)
    except user_errors() as exc:
        fail(exc)
    return ctx


def _run_checked(ctx: RunContext, recipe: Path, *, prefect: bool, snapshot: str | None, evaluate: bool) -> RunSummary:
    """The checked run, as a Prefect flow or plain calls."""
    from viewmill.pipelines.context import recipe_parameter
    from viewmill.pipelines.run import run_recipe

    if not prefect:
        return run_recipe(ctx, preflight_done=True, snapshot=snapshot, evaluate=evaluate)
    # A flow rebuilds this context from the recipe, run id and settings; the overrides are in the recipe.
    recipe_json = recipe_parameter(ctx.recipe)
    given = {"preflight_done": True, "settings": ctx.settings, "recipe": recipe_json, "run_id": ctx.run_id}
    state = ctx.state
    if evaluate:
        return _flow("recipe_flow", state)(str(recipe), str(state.root), **given)
    return _flow("train_flow", state)(str(recipe), str(state.root), snapshot=snapshot, **given)


def sweep(
    recipe: Annotated[Path, typer.Argument(help="recipe YAML with a sweep section, e.g. recipes/snli-bsl-sweep.yaml")],
    state_dir: StateDir = None,
    catalog: CatalogOption = None,
    overrides: Overrides = None,
    prefect: PrefectOption = True,
    dask: DaskOption = None,
) -> None:
    """Train every configuration of the recipe's sweep on the same pairs, evaluate each, choose
    the best on sweep.select_on: results go to the lake (sweeps, evals), a Markdown table and a PNG."""
    _check_arguments(recipe, dask, prefect)
    from viewmill.augment.ingest.readers import CorpusError
    from viewmill.pipelines.context import RunContext
    from viewmill.pipelines.stages.preflight import preflight
    from viewmill.pipelines.sweep import load_sweep, run_sweep

    settings = load_settings(catalog, dask)
    state = StatePaths.resolve(state_dir)
    try:
        recipes = load_sweep(recipe, overrides)  # every configuration valid before any runs; the file read once
        preflight(RunContext(recipes.base, state, settings))
    except user_errors() as exc:
        fail(exc)
    try:  # from here on a failure is a failed run, not bad input
        if prefect:
            sweep_flow = _flow("sweep_flow", state)
            result = sweep_flow(str(recipe), str(state.root), settings=settings, recipes=recipes.as_parameter())
            markdown = Path(result["markdown_path"]).read_text(encoding="utf-8")
            paths = (result["markdown_path"], result["plot_path"])
        else:
            report = run_sweep(recipes, state, settings=settings)
            markdown, paths = report.markdown, (report.markdown_path, report.plot_path)
    except (PrefectServerError, CorpusError) as exc:
        fail(exc)
    except Exception as exc:
        if os.environ.get(DEBUG_ENV):
            raise
        fail(exc, EXIT_FAILED)
    console.print(markdown, highlight=False, markup=False)
    console.print(f"table: {paths[0]}\nplot: {paths[1]}", highlight=False)


def serve(
    recipe: Annotated[Path, typer.Argument(help="recipe YAML to augment nightly and train on new pairs")],
    cron: Annotated[str, typer.Option(help="augmentation schedule (cron, server time zone)")] = "0 2 * * *",
    state_dir: StateDir = None,
    catalog: CatalogOption = None,
) -> None:
    """Serve this recipe's deployments from this machine (needs a Prefect server: PREFECT_API_URL or the profile's)."""
    require_recipe(recipe)
    from viewmill.pipelines.recipe import load_recipe
    from viewmill.storage.catalog import CATALOG_ENV

    if catalog:  # the flow runs served here read VIEWMILL_* once each, like a worker's runs
        os.environ[CATALOG_ENV] = catalog
    state = StatePaths.resolve(state_dir)
    name = load_recipe(recipe).name  # a bad recipe fails here, before any server is asked
    from viewmill.pipelines.orchestration.prefect_env import connect_prefect

    # schedules and triggers need the user's server (PREFECT_API_URL or the profile's)
    err_console.print(connect_prefect(None), highlight=False)
    from viewmill.pipelines.orchestration import deploy

    deploy.ensure_gpu_limit()
    served = deploy.recipe_deployments(recipe, state.root, cron=cron)  # named apart from `viewmill deploy`'s
    warning = deploy.rival_warning(name, served=True)
    if warning:
        err_console.print(warning, highlight=False)
    names = ", ".join(f"{d.flow_name}/{d.name}" for d in served)
    deploy.serve(served, lambda: err_console.print(f"serving {names}: Ctrl-C or SIGTERM stops and pauses them",
                                                   highlight=False))  # fmt: skip
