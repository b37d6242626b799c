"""The `viewmill` command line: the app, how a command ends (one message, an exit status),
and the small commands; `run_cli` holds the commands that run recipes, `lake_cli`, `data`,
`prefect_cli` and `views_cli` the other sub-commands."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from viewmill.pipelines import lake_cli
from viewmill.pipelines.cli_common import (
    DEBUG_ENV,
    EXIT_CODES,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    HELP,
    USER_ERRORS,
    CatalogOption,
    DaskOption,
    Overrides,
    PrefectOption,
    StateDir,
    console,
    err_console,
    fail,
    load_settings,
    open_lake_read_only,
)
from viewmill.pipelines.data import data_app
from viewmill.pipelines.models_cli import models_app
from viewmill.pipelines.output import OutputError, OutputFormat, print_table, write_file, write_stdout
from viewmill.pipelines.prefect_cli import deploy, server_app
from viewmill.pipelines.recipe import load_suite
from viewmill.pipelines.run_cli import run, serve, sweep, train
from viewmill.pipelines.state import StatePaths
from viewmill.pipelines.views_cli import views_app
from viewmill.storage.sandbox import QueryLimits, run_query

from viewmill import __version__

# The CLI's public names; those defined in `cli_common` and `run_cli` stay importable from here.
__all__ = [
    "DEBUG_ENV",
    "EXIT_CODES",
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "HELP",
    "USER_ERRORS",
    "CatalogOption",
    "DaskOption",
    "Overrides",
    "PrefectOption",
    "StateDir",
    "ViewmillGroup",
    "app",
    "console",
    "err_console",
    "main",
    "run",
    "serve",
    "sweep",
    "train",
]


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
            fail(exc)
        except Exception as exc:
            if os.environ.get(DEBUG_ENV):
                raise
            fail(exc, EXIT_FAILED)


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
app.add_typer(models_app, name="models")
app.command()(deploy)
app.command()(run)
app.command()(train)
app.command()(sweep)


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
                              settings=load_settings(catalog))  # fmt: skip
    except USER_ERRORS as exc:
        fail(exc)
    console.print(report.markdown, highlight=False, markup=False)
    for line in report.conventions:
        console.print(line, highlight=False, markup=False)
    console.print(f"table: {report.markdown_path}\nplot: {report.plot_path}", highlight=False)


app.command()(serve)


QUERY_FILE_LIMIT = 1 << 20  # a query, not a data file: 1 MiB


@app.command()
def sql(
    ctx: typer.Context,
    query: Annotated[
        str | None, typer.Argument(help="one DuckDB SQL query over the lake's tables; - reads it from stdin")
    ] = None,
    query_file: Annotated[
        Path | None, typer.Option("--file", "-f", help="read the query from this file (- for stdin)")
    ] = None,
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
        Path | None, typer.Option("--output", "-o", help="write the result to this file (not inside the lake)")
    ] = None,
    timeout: Annotated[
        float, typer.Option("--timeout", metavar="SECONDS", help="stop the query after this long")
    ] = QueryLimits.timeout_s,
    memory: Annotated[
        str, typer.Option("--memory", metavar="SIZE", help="the query's memory limit (nothing spills to disk)")
    ] = QueryLimits.memory,
) -> None:
    """Answer an ad hoc question over the lake: one read-only query, under a time and memory
    limit; only the result goes to stdout."""
    if fmt is OutputFormat.parquet and output is None:
        fail(OutputError("--format parquet is binary: add --output FILE (e.g. --output result.parquet)"))
    if fmt is OutputFormat.table and output is not None:
        fail(OutputError("--output needs --format csv, json or parquet (table is for the terminal)"))
    text = _query_text(ctx, query, query_file)
    try:
        limits = QueryLimits(timeout_s=timeout, memory=memory)
        root = StatePaths.resolve(state_dir).lake
        table = run_query(root, text, catalog=load_settings(catalog).catalog_spec(), limits=limits, output=output)
    except (*USER_ERRORS, ValueError) as exc:
        fail(exc)
    if output is None:
        write_stdout(table, fmt, console)
    else:
        write_file(table, fmt, output)
        err_console.print(f"wrote {table.num_rows} row(s) to {output}", highlight=False)


def _query_text(ctx: typer.Context, query: str | None, query_file: Path | None) -> str:
    """The query from the argument, -f FILE, or stdin (`-` in either place)."""
    if (query is None) == (query_file is None):
        raise typer.BadParameter(
            "give the query once: as an argument, with -f FILE, or - to read it from stdin", ctx=ctx
        )
    if query is not None and query != "-":
        return query
    source = "-" if query == "-" or str(query_file) == "-" else str(query_file)
    try:
        if source == "-":
            text = sys.stdin.read(QUERY_FILE_LIMIT + 1)
        else:
            with open(source, encoding="utf-8") as handle:
                text = handle.read(QUERY_FILE_LIMIT + 1)
    except OSError as exc:
        fail(ValueError(f"cannot read the query file {source}: {exc.strerror or exc}"))
    except UnicodeDecodeError as exc:
        fail(ValueError(f"the query in {'stdin' if source == '-' else source} is not UTF-8 text ({exc.reason})"))
    if len(text) > QUERY_FILE_LIMIT:
        where = "stdin" if source == "-" else source
        fail(ValueError(f"the query in {where} is over 1 MiB: give viewmill sql one query, not a data file"))
    return text


@lake_app.command("snapshots")
def snapshots(state_dir: StateDir = None, catalog: CatalogOption = None) -> None:
    """List the named pairs snapshots."""
    try:
        with open_lake_read_only(state_dir, catalog) as lake:
            table = lake.arrow(
                "SELECT snapshot, recipe, corpus, n_pairs, lake_version, created_at, run_id "
                "FROM snapshots ORDER BY created_at"
            )
    except USER_ERRORS as exc:
        fail(exc)
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
        with open_lake_read_only(state_dir, catalog) as lake:
            n = export_snapshot(lake, snapshot, out, fmt)
    except USER_ERRORS as exc:
        fail(exc)
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
        fail(exc)


if __name__ == "__main__":
    app()
