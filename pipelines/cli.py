"""The `viewmill` command line."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from viewmill.augment.engines import EngineError
from viewmill.augment.ingest import CorpusError
from viewmill.pipelines.prefect_env import PrefectServerError
from viewmill.pipelines.recipe import RecipeError, load_recipe, load_suite
from viewmill.pipelines.state import StatePaths
from viewmill.storage.lake import CATALOG_ENV, Lake, LakeError
from viewmill.train.encoder import EncoderError
from viewmill.train.evaluate import EvalDataError

app = typer.Typer(help="viewmill: augmented view pairs for sentence-embedding learning.", no_args_is_help=True)
lake_app = typer.Typer(help="Inspect the lake.", no_args_is_help=True)
app.add_typer(lake_app, name="lake")
# Piped output is not cut to 80 columns: lake ids and texts must survive `| less` and logs.
console = Console(width=None if sys.stdout.isatty() else 240)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 240)

USER_ERRORS = (RecipeError, CorpusError, EngineError, LakeError, EncoderError, EvalDataError, PrefectServerError)
StateDir = Annotated[
    Path | None, typer.Option("--state-dir", help="state directory (default $VIEWMILL_HOME or ./.viewmill)")
]
CatalogOption = Annotated[
    str | None,
    typer.Option(
        "--catalog",
        help="lake catalog: sqlite (default), duckdb, or postgres:'dbname=... host=...' (default $VIEWMILL_CATALOG)",
    ),
]


def _use_catalog(catalog: str | None) -> None:
    # Every Lake opened by this process (stages, Prefect tasks) reads the same setting.
    if catalog:
        os.environ[CATALOG_ENV] = catalog


def _open_lake(state_dir: Path | None, catalog: str | None) -> Lake:
    _use_catalog(catalog)
    return Lake(StatePaths.resolve(state_dir).lake, read_only=True)


def _fail(exc: Exception) -> None:
    err_console.print(f"[bold red]error:[/] {exc}", highlight=False)
    raise typer.Exit(2)


Overrides = Annotated[
    list[str] | None, typer.Option("--set", help="override a recipe setting, e.g. --set train.objective=ntxent")
]
PrefectOption = Annotated[
    bool, typer.Option(help="run as a Prefect flow (ephemeral API unless PREFECT_API_URL is set)")
]

DaskOption = Annotated[
    str | None,
    typer.Option(
        "--dask",
        help="run augmentation shards on a Dask cluster: tcp://scheduler:8786, or local:N (default $VIEWMILL_DASK)",
    ),
]


def _check_dask(dask: str | None, prefect: bool) -> None:
    if dask and not prefect:
        raise RecipeError("--dask runs shards as Prefect tasks: drop --no-prefect, or drop --dask")


def _flow(name: str, state: StatePaths, dask: str | None):
    """One of viewmill's flows, with Prefect pointed at this state directory (its server
    checked first) and, with `dask`, its shards on that Dask cluster."""
    from viewmill.pipelines.prefect_env import check_prefect_server, configure_prefect

    configure_prefect(state)
    check_prefect_server()
    from viewmill.pipelines import flows

    chosen = getattr(flows, name)
    return chosen.with_options(task_runner=flows.task_runner(dask)) if dask else chosen


@app.command()
def run(
    recipe: Annotated[Path, typer.Argument(help="recipe YAML, e.g. recipes/demo.yaml")],
    state_dir: StateDir = None,
    catalog: CatalogOption = None,
    overrides: Overrides = None,
    prefect: PrefectOption = True,
    dask: DaskOption = None,
) -> None:
    """Run a recipe end to end: ingest, augment, pair, train, evaluate."""
    _run(recipe, state_dir, catalog, overrides, prefect, dask, snapshot=None, evaluate=True)


@app.command()
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
    _run(recipe, state_dir, catalog, overrides, prefect, dask, snapshot=snapshot, evaluate=False)


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
) -> None:
    from transformers.utils import logging as hf_logging
    from viewmill.pipelines import stages
    from viewmill.pipelines.report import render_summary

    hf_logging.disable_progress_bar()  # viewmill's own bars say what is happening
    _use_catalog(catalog)
    state = StatePaths.resolve(state_dir)
    try:
        _check_dask(dask, prefect)
        parsed = load_recipe(recipe, overrides)
        if not evaluate and parsed.train is None:
            raise RecipeError(f"recipe {recipe} has no train section: add one (see recipes/demo.yaml)")
        ctx = stages.RunContext(parsed, state)
        if snapshot is None:
            stages.preflight(ctx)  # fail fast, before Prefect starts or the lake is touched
        else:
            stages.existing_snapshot(ctx, snapshot)
        if prefect and evaluate:
            recipe_flow = _flow("recipe_flow", state, dask)
            summary = recipe_flow(str(recipe), str(state.root), preflight_done=True, overrides=overrides or [])
        elif prefect:
            train_flow = _flow("train_flow", state, dask)
            summary = train_flow(str(recipe), str(state.root), snapshot=snapshot, preflight_done=True,
                                 overrides=overrides or [])  # fmt: skip
        else:
            summary = stages.run_recipe(ctx, preflight_done=True, snapshot=snapshot, evaluate=evaluate)
    except USER_ERRORS as exc:
        _fail(exc)
    render_summary(summary, console)


@app.command()
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
    from transformers.utils import logging as hf_logging
    from viewmill.pipelines import stages
    from viewmill.pipelines.sweep import run_sweep

    hf_logging.disable_progress_bar()
    _use_catalog(catalog)
    state = StatePaths.resolve(state_dir)
    try:
        _check_dask(dask, prefect)
        parsed = load_recipe(recipe, overrides)
        if parsed.sweep is None:
            raise RecipeError(f"recipe {recipe} has no sweep section: add sweep.grid or sweep.configs")
        stages.preflight(stages.RunContext(parsed, state))
        if prefect:
            sweep_flow = _flow("sweep_flow", state, dask)
            result = sweep_flow(str(recipe), str(state.root), overrides=overrides or [])
            markdown = Path(result["markdown_path"]).read_text(encoding="utf-8")
            paths = (result["markdown_path"], result["plot_path"])
        else:
            report = run_sweep(recipe, state, overrides)
            markdown, paths = report.markdown, (report.markdown_path, report.plot_path)
    except USER_ERRORS as exc:
        _fail(exc)
    console.print(markdown, highlight=False, markup=False)
    console.print(f"table: {paths[0]}\nplot: {paths[1]}", highlight=False)


@app.command("eval")
def eval_models(
    models: Annotated[list[str], typer.Argument(help="model directories, embedded:NAME or hub ids")],
    suite: Annotated[Path, typer.Option(help="evaluation suite YAML (tasks)")] = Path("recipes/eval-papers.yaml"),
    baselines: Annotated[
        bool, typer.Option(help="add each model's untrained start with mean pooling and with [CLS]")
    ] = True,
    out: Annotated[Path | None, typer.Option(help="folder for the Markdown table and the plot")] = None,
    state_dir: StateDir = None,
    catalog: CatalogOption = None,
) -> None:
    """Evaluate models side by side: results go to the lake's evals, a Markdown table and a PNG plot."""
    from viewmill.pipelines.evaluation import evaluate_cli

    _use_catalog(catalog)
    state = StatePaths.resolve(state_dir)
    try:
        report = evaluate_cli(models, load_suite(suite), state, baselines=baselines, out=out)
    except USER_ERRORS as exc:
        _fail(exc)
    console.print(report.markdown, highlight=False, markup=False)
    for line in report.conventions:
        console.print(line, highlight=False, markup=False)
    console.print(f"table: {report.markdown_path}\nplot: {report.plot_path}", highlight=False)


@app.command()
def serve(
    recipe: Annotated[Path, typer.Argument(help="recipe YAML to augment nightly and train on new pairs")],
    cron: Annotated[str, typer.Option(help="augmentation schedule (cron, server time zone)")] = "0 2 * * *",
    state_dir: StateDir = None,
    catalog: CatalogOption = None,
) -> None:
    """Serve this recipe's deployments from this machine (needs a Prefect server: PREFECT_API_URL)."""
    _use_catalog(catalog)
    state = StatePaths.resolve(state_dir)
    try:
        load_recipe(recipe)
    except USER_ERRORS as exc:
        _fail(exc)
    if not os.environ.get("PREFECT_API_URL"):
        _fail(RecipeError(
            "viewmill serve needs a Prefect server for schedules and triggers: start one (prefect server start, "
            "or docker compose -f docker/compose.yaml up) and set PREFECT_API_URL=http://host:4200/api"
        ))  # fmt: skip
    from viewmill.pipelines.prefect_env import check_prefect_server, configure_prefect

    configure_prefect(state)
    try:
        check_prefect_server()
    except USER_ERRORS as exc:
        _fail(exc)
    from prefect import serve as prefect_serve
    from viewmill.pipelines.flows import deployments, ensure_gpu_limit

    ensure_gpu_limit()
    prefect_serve(*deployments(str(recipe), str(state.root), cron=cron))


def _print_table(table, fmt: str) -> None:
    import polars as pl

    frame = pl.from_arrow(table)
    if fmt == "csv":
        sys.stdout.write(frame.write_csv())
    elif fmt == "json":
        sys.stdout.write(frame.write_ndjson())
    else:
        out = Table(show_lines=False)
        for name in frame.columns:
            out.add_column(name, overflow="fold")
        for row in frame.iter_rows():
            out.add_row(*("" if v is None else str(v) for v in row))
        console.print(out)
        console.print(f"{frame.height} row(s)")


@app.command()
def sql(
    query: Annotated[str, typer.Argument(help="DuckDB SQL over the lake's tables")],
    state_dir: StateDir = None,
    catalog: CatalogOption = None,
    fmt: Annotated[str, typer.Option("--format", help="table, csv or json (one object a line)")] = "table",
) -> None:
    """Answer an ad hoc question over the lake (read-only)."""
    import duckdb

    if fmt not in {"table", "csv", "json"}:
        _fail(ValueError(f"unknown --format '{fmt}': use table, csv or json"))
    try:
        with _open_lake(state_dir, catalog) as lake:
            table = lake.arrow(query)
    except USER_ERRORS as exc:
        _fail(exc)
    except duckdb.Error as exc:
        _fail(ValueError(f"query failed: {exc}"))
    _print_table(table, fmt)


@lake_app.command("snapshots")
def snapshots(state_dir: StateDir = None, catalog: CatalogOption = None) -> None:
    """List the named pairs snapshots."""
    try:
        with _open_lake(state_dir, catalog) as lake:
            table = lake.arrow(
                "SELECT snapshot, recipe, corpus, n_pairs, lake_version, created_at, run_id "
                "FROM snapshots ORDER BY created_at"
            )
    except USER_ERRORS as exc:
        _fail(exc)
    _print_table(table, "table")


@lake_app.command("export")
def export(
    snapshot: Annotated[str, typer.Argument(help="snapshot name (see viewmill lake snapshots)")],
    out: Annotated[Path, typer.Argument(help="output file, .parquet or .jsonl")],
    fmt: Annotated[str | None, typer.Option("--format", help="parquet or jsonl (default: from the suffix)")] = None,
    state_dir: StateDir = None,
    catalog: CatalogOption = None,
) -> None:
    """Export a pairs snapshot for other tools."""
    from viewmill.storage.snapshots import export_snapshot

    try:
        with _open_lake(state_dir, catalog) as lake:
            n = export_snapshot(lake, snapshot, out, fmt)
    except USER_ERRORS as exc:
        _fail(exc)
    console.print(f"wrote {n} pairs of {snapshot} to {out}", highlight=False)


@lake_app.command("compact")
def compact(state_dir: StateDir = None, catalog: CatalogOption = None) -> None:
    """Merge small Parquet files (many chunked commits) into larger ones."""
    _use_catalog(catalog)
    try:
        with Lake(StatePaths.resolve(state_dir).lake) as lake:
            before = lake.scalar("SELECT count(*) FROM ducklake_list_files('lake', 'views')")
            lake.compact()
            after = lake.scalar("SELECT count(*) FROM ducklake_list_files('lake', 'views')")
    except USER_ERRORS as exc:
        _fail(exc)
    console.print(f"views: {before} -> {after} data files")


if __name__ == "__main__":
    app()
