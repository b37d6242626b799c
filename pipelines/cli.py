"""The `viewmill` command line."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from viewmill.augment.engines import EngineError
from viewmill.augment.ingest import CorpusError
from viewmill.pipelines import lake_cli
from viewmill.pipelines.data import data_app
from viewmill.pipelines.output import OutputError, OutputFormat, print_table, write_file, write_stdout
from viewmill.pipelines.prefect_cli import deploy, server_app
from viewmill.pipelines.prefect_env import PrefectServerError
from viewmill.pipelines.recipe import RecipeError, load_recipe, load_suite
from viewmill.pipelines.state import StatePaths
from viewmill.pipelines.views_cli import views_app
from viewmill.storage.lake import CATALOG_ENV, Lake, LakeError
from viewmill.storage.settings import Settings
from viewmill.train.encoder import EncoderError
from viewmill.train.evaluate import EvalDataError

from viewmill import __version__
from viewmill.extras import MissingExtraError, missing_extra

# Results go to stdout (`console`); progress, status and errors to stderr (`err_console`),
# so `viewmill sql ... --format csv > out.csv` and pipes get the result and nothing else.
# Piped output is not cut to 80 columns: lake ids and texts must survive `| less` and logs.
console = Console(width=None if sys.stdout.isatty() else 240)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 240)

USER_ERRORS = (
    RecipeError, CorpusError, EngineError, LakeError, EncoderError, EvalDataError, PrefectServerError, OutputError,
    MissingExtraError,
)  # fmt: skip
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
DEBUG_ENV = "VIEWMILL_DEBUG"
EXIT_CODES = "Exit status: 0 ok, 1 a failed run, 2 usage or bad input. VIEWMILL_DEBUG=1 shows tracebacks."
# Every app (sub-apps too) takes -h as well as --help.
HELP = {"help_option_names": ["-h", "--help"]}


class ViewmillGroup(typer.core.TyperGroup):
    """Whatever a command raises ends as one message on stderr and an exit status:
    2 for bad input (the USER_ERRORS), 1 for anything else (a failed run)."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, typer.exceptions.TyperException):  # help, usage errors, Ctrl-C
            raise
        except BrokenPipeError:
            _closed_pipe()
        except USER_ERRORS as exc:
            _fail(exc)
        except Exception as exc:
            if os.environ.get(DEBUG_ENV):
                raise
            _fail(exc, EXIT_FAILED)


def _closed_pipe() -> None:
    # The reader stopped early (`| head`): end quietly as Unix tools killed by SIGPIPE do (128 + 13),
    # with stdout on /dev/null so Python's flush at exit does not complain.
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    raise typer.Exit(141)


app = typer.Typer(
    help="viewmill: augmented view pairs for sentence-embedding learning.",
    epilog=EXIT_CODES,
    no_args_is_help=True,
    cls=ViewmillGroup,
    context_settings=HELP,
)
lake_app = typer.Typer(help="Inspect the lake.", no_args_is_help=True, context_settings=HELP)
app.add_typer(lake_app, name="lake")
app.add_typer(data_app, name="data")
app.add_typer(server_app, name="server")
app.add_typer(views_app, name="views")
app.command()(deploy)


def _print_version(value: bool) -> None:
    if value:
        console.print(f"viewmill {__version__}", highlight=False)
        raise typer.Exit(EXIT_OK)


@app.callback()
def main(
    version: Annotated[
        bool, typer.Option("--version", callback=_print_version, is_eager=True, help="print the version and exit")
    ] = False,
) -> None:
    """viewmill: augmented view pairs for sentence-embedding learning."""


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


def _settings(catalog: str | None = None, dask: str | None = None) -> Settings:
    """VIEWMILL_* read once, flags winning; commands pass the result on explicitly."""
    return Settings().with_overrides(catalog=catalog, dask=dask)


def _open_lake(state_dir: Path | None, catalog: str | None) -> Lake:
    return _settings(catalog).open_lake(StatePaths.resolve(state_dir).lake, read_only=True)


def _fail(exc: Exception, code: int = EXIT_USAGE) -> None:
    """One message on stderr, then exit: EXIT_USAGE for bad input, EXIT_FAILED for a run that failed."""
    missing = missing_extra(exc)
    if missing is not None:  # an optional package this install lacks: name the extra that brings it
        exc, code = missing, EXIT_USAGE
    known = isinstance(exc, (*USER_ERRORS, ValueError))
    message = str(exc) if known else f"{type(exc).__name__}: {exc}"
    if code == EXIT_FAILED:
        message = f"failed: {message} (VIEWMILL_DEBUG=1 shows the traceback)"
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, markup=True)
    raise typer.Exit(code)


Overrides = Annotated[
    list[str] | None, typer.Option("--set", help="override a recipe setting, e.g. --set train.objective=ntxent")
]
PrefectOption = Annotated[
    bool, typer.Option(help="run as a Prefect flow (your configured Prefect server, else a temporary local one)")
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


def _flow(name: str, state: StatePaths):
    """One of viewmill's flows, with Prefect pointed at a server (the user's, checked first,
    else the state directory's temporary one). Where its shards run comes with its settings."""
    from viewmill.pipelines.prefect_env import connect_prefect

    err_console.print(connect_prefect(state), highlight=False)
    from viewmill.pipelines import flows

    return getattr(flows, name)


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
    from viewmill.pipelines.context import RunContext
    from viewmill.pipelines.pair_stage import existing_snapshot
    from viewmill.pipelines.preflight import preflight
    from viewmill.pipelines.report import render_summary
    from viewmill.pipelines.run import run_recipe

    hf_logging.disable_progress_bar()  # viewmill's own bars say what is happening
    settings = _settings(catalog, dask)
    state = StatePaths.resolve(state_dir)
    try:
        _check_dask(dask, prefect)
        parsed = load_recipe(recipe, overrides)
        if not evaluate and parsed.train is None:
            raise RecipeError(f"recipe {recipe} has no train section: add one (see recipes/demo.yaml)")
        ctx = RunContext(parsed, state, settings)
        if snapshot is None:
            preflight(ctx)  # fail fast, before Prefect starts or the lake is touched
        else:
            existing_snapshot(ctx, snapshot)
    except USER_ERRORS as exc:
        _fail(exc)
    try:  # from here on a failure is a failed run (recorded in `runs`), not bad input
        if prefect and evaluate:
            recipe_flow = _flow("recipe_flow", state)
            summary = recipe_flow(str(recipe), str(state.root), preflight_done=True, overrides=overrides or [],
                                  settings=settings)  # fmt: skip
        elif prefect:
            train_flow = _flow("train_flow", state)
            summary = train_flow(str(recipe), str(state.root), snapshot=snapshot, preflight_done=True,
                                 overrides=overrides or [], settings=settings)  # fmt: skip
        else:
            summary = run_recipe(ctx, preflight_done=True, snapshot=snapshot, evaluate=evaluate)
    except PrefectServerError as exc:
        _fail(exc)
    except Exception as exc:
        if os.environ.get(DEBUG_ENV):
            raise
        _fail(exc, EXIT_FAILED)
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
    from viewmill.pipelines.context import RunContext
    from viewmill.pipelines.preflight import preflight
    from viewmill.pipelines.sweep import run_sweep

    hf_logging.disable_progress_bar()
    settings = _settings(catalog, dask)
    state = StatePaths.resolve(state_dir)
    try:
        _check_dask(dask, prefect)
        parsed = load_recipe(recipe, overrides)
        if parsed.sweep is None:
            raise RecipeError(f"recipe {recipe} has no sweep section: add sweep.grid or sweep.configs")
        preflight(RunContext(parsed, state, settings))
    except USER_ERRORS as exc:
        _fail(exc)
    try:  # from here on a failure is a failed run, not bad input
        if prefect:
            sweep_flow = _flow("sweep_flow", state)
            result = sweep_flow(str(recipe), str(state.root), overrides=overrides or [], settings=settings)
            markdown = Path(result["markdown_path"]).read_text(encoding="utf-8")
            paths = (result["markdown_path"], result["plot_path"])
        else:
            report = run_sweep(recipe, state, overrides, settings=settings)
            markdown, paths = report.markdown, (report.markdown_path, report.plot_path)
    except PrefectServerError as exc:
        _fail(exc)
    except Exception as exc:
        if os.environ.get(DEBUG_ENV):
            raise
        _fail(exc, EXIT_FAILED)
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

    state = StatePaths.resolve(state_dir)
    try:
        report = evaluate_cli(models, load_suite(suite), state, baselines=baselines, out=out,
                              settings=_settings(catalog))  # fmt: skip
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
    """Serve this recipe's deployments from this machine (needs a Prefect server: PREFECT_API_URL or the profile's)."""
    if catalog:  # the flow runs served here read VIEWMILL_* once each, like a worker's runs
        os.environ[CATALOG_ENV] = catalog
    state = StatePaths.resolve(state_dir)
    try:
        load_recipe(recipe)
    except USER_ERRORS as exc:
        _fail(exc)
    from viewmill.pipelines.prefect_env import connect_prefect

    try:  # schedules and triggers need the user's server (PREFECT_API_URL or the profile's)
        err_console.print(connect_prefect(None), highlight=False)
    except USER_ERRORS as exc:
        _fail(exc)
    from prefect import serve as prefect_serve
    from viewmill.pipelines.flows import deployments, ensure_gpu_limit

    ensure_gpu_limit()
    prefect_serve(*deployments(str(recipe), str(state.root), cron=cron))


@app.command()
def sql(
    query: Annotated[str, typer.Argument(help="DuckDB SQL over the lake's tables")],
    state_dir: StateDir = None,
    catalog: CatalogOption = None,
    fmt: Annotated[
        OutputFormat,
        typer.Option(
            "--format",
            help="table; csv (nested values as JSON text), json (one object a line, nested values as JSON) "
            "or parquet (needs --output)",
        ),
    ] = OutputFormat.table,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="write the result to this file instead of stdout")
    ] = None,
) -> None:
    """Answer an ad hoc question over the lake (read-only); only the result goes to stdout."""
    import duckdb

    if fmt is OutputFormat.parquet and output is None:
        _fail(OutputError("--format parquet is binary: add --output FILE (e.g. --output result.parquet)"))
    if fmt is OutputFormat.table and output is not None:
        _fail(OutputError("--output needs --format csv, json or parquet (table is for the terminal)"))
    from viewmill.storage.sandbox import run_query

    try:  # read-only and locked down
        table = run_query(StatePaths.resolve(state_dir).lake, query, catalog=_settings(catalog).catalog_spec())
    except USER_ERRORS as exc:
        _fail(exc)
    except duckdb.Error as exc:
        _fail(ValueError(f"query failed: {exc}"))
    if output is None:
        write_stdout(table, fmt, console)
    else:
        write_file(table, fmt, output)
        err_console.print(f"wrote {table.num_rows} row(s) to {output}", highlight=False)


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
    print_table(table, console)


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
    err_console.print(f"wrote {n} pairs of {snapshot} to {out}", highlight=False)  # status, not a result


# init, compact, verify, repair: making, tidying, checking and mending a lake
lake_cli.register(lake_app)



@app.command()
def plugins() -> None:
    """List the names recipes can use: augmenter methods, engines, objectives and corpus formats
    (viewmill's own, then installed plugins' from their entry points)."""
    from viewmill.augment.augmenters import AUGMENTERS
    from viewmill.augment.engines import ENGINES
    from viewmill.augment.readers import READERS
    from viewmill.train.objectives import OBJECTIVES

    try:
        for registry in (AUGMENTERS, ENGINES, OBJECTIVES, READERS):
            console.print(f"{registry.kind}s [{registry.group}]: {registry.help()}", highlight=False, markup=False)
    except ValueError as exc:  # a broken or clashing plugin
        _fail(exc)

if __name__ == "__main__":
    app()
