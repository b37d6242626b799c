"""`viewmill sql`: one read-only query over the lake (see viewmill.storage.sandbox), its result
on stdout or in a file. Loaded only when the command runs (see `viewmill.pipelines.cli.app`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from viewmill.pipelines.cli.common import (
    CatalogOption,
    StateDir,
    console,
    err_console,
    fail,
    load_settings,
    user_errors,
)
from viewmill.pipelines.cli.output import OutputError, OutputFormat, write_file, write_stdout
from viewmill.pipelines.state import StatePaths
from viewmill.storage.sandbox import QueryLimits, run_query

QUERY_FILE_LIMIT = 1 << 20  # a query, not a data file: 1 MiB


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
    except (*user_errors(), ValueError) as exc:
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
