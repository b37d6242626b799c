"""Query results for people (a rich table) and for tools (CSV, JSON lines, Parquet).

Results go to stdout or a file; progress and status never do (they go to stderr), so
`viewmill sql ... --format csv > out.csv` and pipes get the result and nothing else.
"""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path

import pyarrow as pa
from rich.console import Console
from rich.table import Table


class OutputFormat(StrEnum):
    table = "table"
    csv = "csv"
    json = "json"
    parquet = "parquet"


class OutputError(ValueError):
    """The requested output cannot be written as asked; the message says what to pass instead."""


def nested_as_json_text(table: pa.Table) -> pa.Table:
    """Struct, list and map columns replaced by their JSON text (DuckDB's to_json), for
    formats whose cells hold scalars only (CSV, the terminal table). Other columns are untouched."""
    nested = [i for i, field in enumerate(table.schema) if pa.types.is_nested(field.type)]
    if not nested:
        return table
    import duckdb

    with duckdb.connect() as con:
        con.register("result", table.select(nested))
        select = ", ".join(f"to_json(#{n + 1})::VARCHAR" for n in range(len(nested)))
        encoded = con.execute(f"SELECT {select} FROM result").to_arrow_table()
    for n, i in enumerate(nested):
        table = table.set_column(i, pa.field(table.schema.field(i).name, pa.string()), encoded.column(n))
    return table


def render(table: pa.Table, fmt: OutputFormat) -> bytes:
    """The table as CSV (header row; nested values as JSON text) or JSON lines (nested values as JSON)."""
    import polars as pl

    if fmt is OutputFormat.csv:
        return pl.from_arrow(nested_as_json_text(table)).write_csv().encode("utf-8")
    if fmt is OutputFormat.json:
        return pl.from_arrow(table).write_ndjson().encode("utf-8")
    raise OutputError(f"--format {fmt.value} is not text: use csv or json, or write it with --output FILE")


def write_file(table: pa.Table, fmt: OutputFormat, path: Path) -> None:
    """Written to a temporary file beside `path`, then renamed: a failed write leaves no partial file
    and the old `path` as it was."""
    if fmt is OutputFormat.table:
        raise OutputError("--output needs --format csv, json or parquet (table is for the terminal)")
    from viewmill.storage.output_paths import atomic_file  # the path was checked against the lake (run_query)

    with atomic_file(path.expanduser()) as tmp:
        if fmt is OutputFormat.parquet:
            import pyarrow.parquet as pq

            pq.write_table(table, tmp)
        else:
            tmp.write_bytes(render(table, fmt))


def write_stdout(table: pa.Table, fmt: OutputFormat, console: Console) -> None:
    """CSV and JSON as bytes on stdout; the table format through `console` (the stdout console)."""
    if fmt is OutputFormat.parquet:
        raise OutputError("--format parquet is binary: add --output FILE (e.g. --output result.parquet)")
    if fmt is OutputFormat.table:
        print_table(table, console)
        return
    data = render(table, fmt)
    stream = getattr(sys.stdout, "buffer", None)
    if stream is None:  # a text-only stdout (some test harnesses)
        sys.stdout.write(data.decode("utf-8"))
    else:
        sys.stdout.flush()
        view = memoryview(data)
        while view:  # a buffered write can stop short (a reader gone); the next one then raises
            view = view[stream.write(view) :]
    sys.stdout.flush()


def print_table(table: pa.Table, console: Console) -> None:
    shown = nested_as_json_text(table)
    out = Table(show_lines=False)
    for name in shown.column_names:
        out.add_column(name, overflow="fold")
    for row in zip(*(column.to_pylist() for column in shown.columns), strict=True):
        out.add_row(*("" if v is None else str(v) for v in row))
    console.print(out)
    console.print(f"{shown.num_rows} row(s)")
