"""Query results for people (a table on the terminal) and for tools (CSV, JSON lines, Parquet).

Results go to stdout or a file; progress and status never do (they go to stderr), so
`viewmill sql ... --format csv > out.csv` and pipes get the result and nothing else. A result
streams through in Arrow batches, so Python holds one batch at a time; the terminal table shows
at most `--max-rows` rows and cuts long values; a file is written beside its target and renamed
at the end (storage.output_paths.atomic_file), so a limit hit or an error leaves no partial file.
What each DuckDB type becomes in each format: result_types.
"""

from __future__ import annotations

import csv
import io
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pyarrow as pa
from rich.console import Console
from rich.table import Table
from rich.text import Text
from viewmill.pipelines.cli.common import err_console
from viewmill.pipelines.cli.output_formats import MAX_ROWS, OutputFormat
from viewmill.pipelines.cli.result_types import Converter

MAX_CELL = 120  # characters of one value the terminal table shows


def write_result(
    batches: Iterable[pa.RecordBatch],
    schema: pa.Schema,
    fmt: OutputFormat,
    output: Path | None,
    *,
    memory: str,
    max_rows: int = MAX_ROWS,
    console: Console,
    check_time: Callable[[], None] = lambda: None,
) -> int:
    """The result to `output` (a file, written aside then renamed) or stdout (`console` for the
    table); returns the number of rows. `check_time` raises once the command's time is up: it runs
    before the table is drawn and before a file takes its name. result_types.TypeRefused for a
    column the format cannot hold."""
    converter = Converter(schema, memory)
    try:
        if fmt is OutputFormat.table:
            return print_rows(batches, converter, console, max_rows, check_time)
        if output is None:
            return _write_text(batches, converter, fmt, _to_stdout)
        from viewmill.storage.output_paths import atomic_file  # the path was checked against the lake

        with atomic_file(output.expanduser()) as partial:
            if fmt is OutputFormat.parquet:
                counted = _Counted(batches)
                converter.write_parquet(counted, partial)
            else:
                with partial.open("wb") as handle:
                    counted = _Counted(batches)
                    _write_text(counted, converter, fmt, handle.write)
            check_time()
        return counted.rows
    finally:
        converter.close()


def _write_text(
    batches: Iterable[pa.RecordBatch], converter: Converter, fmt: OutputFormat, write: Callable[[bytes], object]
) -> int:
    """CSV (a header row, then the rows) or JSON lines, a batch at a time."""
    import polars as pl

    rows = 0
    if fmt is OutputFormat.csv:
        header = io.StringIO()
        csv.writer(header, lineterminator="\n").writerow(converter.names)
        write(header.getvalue().encode("utf-8"))
    else:
        converter.require_unique_names("JSON")
    for batch in batches:
        rows += batch.num_rows
        if fmt is OutputFormat.csv:
            text = pl.from_arrow(converter.text(batch)).write_csv(include_header=False)
        else:
            text = "".join(line + "\n" for line in converter.json_lines(batch).column(0).to_pylist())
        write(text.encode("utf-8"))
    return rows


class _Counted:
    """Batches passed through, counting their rows."""

    def __init__(self, batches: Iterable[pa.RecordBatch]) -> None:
        self._batches, self.rows = batches, 0

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        for batch in self._batches:
            self.rows += batch.num_rows
            yield batch


def _to_stdout(data: bytes) -> None:
    stream = getattr(sys.stdout, "buffer", None)
    if stream is None:  # a text-only stdout (some test harnesses)
        sys.stdout.write(data.decode("utf-8"))
        return
    sys.stdout.flush()
    view = memoryview(data)
    while view:  # a buffered write can stop short (a reader gone); the next one then raises
        view = view[stream.write(view) :]
    stream.flush()


def print_table(table: pa.Table, console: Console) -> None:
    """A small table (every row) on `console`, as `viewmill sql` prints one; the row count on stderr."""
    converter = Converter(table.schema, "1GB")
    try:
        print_rows(table.to_batches(), converter, console, table.num_rows)
    finally:
        converter.close()


def print_rows(
    batches: Iterable[pa.RecordBatch],
    converter: Converter,
    console: Console,
    max_rows: int,
    check_time: Callable[[], None] = lambda: None,
) -> int:
    """The first `max_rows` rows as a table on `console`, as DuckDB's shell draws one (each
    column's type under its name, numbers on the right); the count, and how to see what was left
    out, on stderr. The rest of the batches are read and counted, not kept."""
    kept: list[pa.RecordBatch] = []
    rows = 0
    for batch in batches:
        if rows < max_rows:
            kept.append(batch.slice(0, max_rows - rows))
        rows += batch.num_rows
    check_time()
    shown = converter.text(pa.Table.from_batches(kept, converter.schema))
    out = Table(show_lines=False)
    for i, name in enumerate(converter.names):
        header = Text.assemble((name, "bold"), "\n", (converter.types[i], "dim"))
        out.add_column(header, justify="right" if converter.numeric(i) else "left", overflow="fold")
    cut = 0
    for row in zip(*(column.to_pylist() for column in shown.columns), strict=True):
        cells = ["NULL" if value is None else value for value in row]
        cut += sum(len(cell) > MAX_CELL for cell in cells)
        out.add_row(*(Text(cell if len(cell) <= MAX_CELL else cell[: MAX_CELL - 1] + "…") for cell in cells))
    console.print(out)
    err_console.print(_footer(rows, min(rows, max_rows), cut), highlight=False)
    return rows


def _footer(rows: int, shown: int, cut: int) -> str:
    footer = f"{rows} row(s)" if shown == rows else (
        f"{rows} rows, the first {shown} shown: --max-rows N shows more; --output FILE (or --format csv) "
        "writes them all"
    )  # fmt: skip
    if cut:
        footer += f"; {cut} value(s) over {MAX_CELL} characters cut (…): --output FILE gives them whole"
    return footer
