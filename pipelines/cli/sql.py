"""`viewmill sql`: one read-only query over the lake (see viewmill.storage.sql.sandbox), its result
on stdout or in a file. Loaded only when the command runs (see `viewmill.pipelines.cli.app`); DuckDB
and pyarrow only once the query is read."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from viewmill.pipelines.cli.common import (
    CatalogOption,
    StateDir,
    catalog_spec,
    console,
    err_console,
    fail,
    user_errors,
)
from viewmill.pipelines.cli.output_formats import MAX_ROWS, OutputError, OutputFormat, output_format
from viewmill.pipelines.state import StatePaths
from viewmill.storage.sql.limits import QueryLimits

QUERY_FILE_LIMIT = 1 << 20  # a query, not a data file: 1 MiB

QueryArgument = Annotated[
    str | None, typer.Argument(help="one DuckDB SQL query over the lake's tables; - reads it from stdin")
]
QueryFileOption = Annotated[
    Path | None, typer.Option("--file", "-f", help="read the query from this file (- for stdin)")
]
FormatOption = Annotated[
    OutputFormat | None,
    typer.Option(
        "--format",
        help="table (the default on the terminal); csv (nested values as JSON text), json or jsonl (one object "
        "a line) or parquet (needs --output); with --output, the default is the file's suffix",
        show_default=False,
    ),
]
OutputOption = Annotated[
    Path | None,
    typer.Option("--output", "-o", help="write the result to this file (not inside the lake), e.g. out.parquet"),
]
TimeoutOption = Annotated[
    float, typer.Option("--timeout", metavar="SECONDS", help="stop the command (query and output) after this long")
]
MemoryOption = Annotated[
    str, typer.Option("--memory", metavar="SIZE", help="the query's memory limit (nothing spills to disk)")
]
MaxRowsOption = Annotated[
    int, typer.Option("--max-rows", min=1, metavar="N", help="rows the table shows (--output FILE writes all)")
]


def sql(
    ctx: typer.Context,
    query: QueryArgument = None,
    query_file: QueryFileOption = None,
    state_dir: StateDir = None,
    catalog: CatalogOption = None,
    fmt: FormatOption = None,
    output: OutputOption = None,
    timeout: TimeoutOption = QueryLimits.timeout_s,
    memory: MemoryOption = QueryLimits.memory,
    max_rows: MaxRowsOption = MAX_ROWS,
) -> None:
    """Answer an ad hoc question over the lake: one read-only query, under a time and memory
    limit; only the result goes to stdout."""
    try:
        fmt = output_format(fmt, output)
    except OutputError as exc:
        fail(exc)
    text = _query_text(ctx, query, query_file)
    # DuckDB and pyarrow load once the query is read: a usage error is named without them.
    from viewmill.pipelines.cli.output import write_result
    from viewmill.storage.sql.sandbox import query_stream

    try:
        limits = QueryLimits(timeout_s=timeout, memory=memory)
        root = StatePaths.resolve(state_dir).lake
        with query_stream(root, text, catalog=catalog_spec(catalog), limits=limits, output=output) as stream:
            rows = write_result(stream, stream.schema, fmt, output, memory=memory, max_rows=max_rows,
                                console=console, check_time=stream.check_time)  # fmt: skip
    except MemoryError:  # Python's side of the result: one message, naming the flag
        fail(QueryLimits(timeout, memory).memory_hit("Python ran out of memory holding its result"))
    except (*user_errors(), ValueError) as exc:
        fail(exc)
    if output is not None:
        err_console.print(f"wrote {rows} row(s) to {output}", highlight=False)


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
