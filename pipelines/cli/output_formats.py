"""What `viewmill sql` can write (--format, --output, --max-rows) and the refusal of a combination
it cannot; apart from `output` so that the command's options load without pyarrow or DuckDB."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

MAX_ROWS = 40  # rows the terminal table shows by default, as DuckDB's own shell does


class OutputFormat(StrEnum):
    table = "table"
    csv = "csv"
    json = "json"
    jsonl = "jsonl"
    parquet = "parquet"


SUFFIXES = {".csv": OutputFormat.csv, ".json": OutputFormat.json, ".jsonl": OutputFormat.jsonl,
            ".ndjson": OutputFormat.jsonl, ".parquet": OutputFormat.parquet}  # fmt: skip


class OutputError(ValueError):
    """The requested output cannot be written as asked; the message says what to pass instead."""


def output_format(fmt: OutputFormat | None, output: Path | None) -> OutputFormat:
    """The format asked for, or (with --output and no --format) the one its suffix names."""
    if output is None:
        if fmt is OutputFormat.parquet:
            raise OutputError("--format parquet is binary: add --output FILE (e.g. --output result.parquet)")
        return fmt or OutputFormat.table
    if fmt is OutputFormat.table:
        raise OutputError("--output needs --format csv, json, jsonl or parquet (table is for the terminal)")
    if fmt is None:
        fmt = SUFFIXES.get(output.suffix.lower())
        if fmt is None:
            raise OutputError(
                f"cannot tell the format of {output} from its suffix: name it .csv, .json, .jsonl or .parquet, "
                "or pass --format csv, json, jsonl or parquet"
            )
    return fmt
