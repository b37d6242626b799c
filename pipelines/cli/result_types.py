"""How each DuckDB type is written in each output format of `viewmill sql` (docs/lake.md,
'Output formats and types').

A result reaches Python as Arrow batches (lossless: HUGEINT, UUID, TIME WITH TIME ZONE keep their
DuckDB types) and goes back through a private in-memory DuckDB connection, which knows every
DuckDB type, to become what the format holds:
- table and CSV: each value as text, as DuckDB casts it to VARCHAR; lists, structs, maps and
  fixed-size arrays as JSON text; BLOB as base64 (DuckDB's from_base64 reads it back);
- JSON lines: one object a row, as DuckDB's to_json writes it; BLOB as base64;
- Parquet: DuckDB's own Parquet writer (what `lake export` writes); HUGEINT and UHUGEINT as
  DECIMAL(38,0) (a value beyond it is refused, naming the column and a cast that works) and
  fixed-size arrays as lists (pyarrow cannot read DuckDB's back).
The private connection reads nothing but the batches handed to it; columns go by position
(`c0`, `c1`, ...), so names a result repeats or quotes never reach its SQL.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import duckdb
import pyarrow as pa

NESTED = {"list", "struct", "map", "array"}
NUMERIC = {"tinyint", "smallint", "integer", "bigint", "hugeint", "utinyint", "usmallint", "uinteger", "ubigint",
           "uhugeint", "float", "double", "decimal", "bignum"}  # fmt: skip
WIDE_INTEGERS = {"hugeint", "uhugeint"}
_SOURCE_COLUMN = re.compile(r"source column c(\d+)")
_FIXED_SIZE = re.compile(r"\[\d+\]")


class TypeRefused(ValueError):
    """A column whose values the format cannot hold; the message names it and a cast that works."""


def quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def positional(batch: pa.RecordBatch | pa.Table) -> pa.RecordBatch | pa.Table:
    """The batch with its columns named c0, c1, ... (Arrow scans match names, and a result may repeat one)."""
    return batch.rename_columns([f"c{i}" for i in range(batch.num_columns)])


class Converter:
    """A result's columns as each format holds them, through a private DuckDB connection."""

    def __init__(self, schema: pa.Schema, memory: str) -> None:
        """`schema`: the result's; `memory`: the query's memory limit, which bounds this connection too."""
        self.schema, self.names = schema, schema.names
        self._schema = positional(pa.Table.from_batches([], schema)).schema
        self._con = duckdb.connect(config={"memory_limit": memory, "threads": 1, "temp_directory": ""})
        self._con.register("batch", _stream(pa.Table.from_batches([], self._schema)))
        types = self._con.table("batch").types
        self.types = [str(t) for t in types]
        self._ids = [t.id for t in types]

    def close(self) -> None:
        self._con.close()

    def numeric(self, i: int) -> bool:
        return self._ids[i] in NUMERIC

    def text(self, batch: pa.RecordBatch | pa.Table) -> pa.Table:
        """Every column as text (VARCHAR), for CSV and the terminal table; NULL stays null."""
        columns = ", ".join(self._text_expression(i) for i in range(len(self.names)))
        return self._select(batch, f"SELECT {columns} FROM batch")

    def json_lines(self, batch: pa.RecordBatch | pa.Table) -> pa.Table:
        """One column: each row as a JSON object (its keys the result's column names, checked
        unique by `require_unique_names` first)."""
        fields = ", ".join(f"{quoted(name)} := {self._json_expression(i)}" for i, name in enumerate(self.names))
        return self._select(batch, f"SELECT to_json(struct_pack({fields}))::VARCHAR FROM batch")

    def write_parquet(self, batches: Iterable[pa.RecordBatch], path: Path) -> None:
        """All `batches` into one Parquet file at `path`, streamed (DuckDB reads a batch at a time).
        An error raised while producing a batch (a limit hit) is raised here as it was."""
        self.require_unique_names("Parquet")
        raised: list[BaseException] = []
        columns = ", ".join(f"{self._parquet_expression(i)} AS {quoted(name)}" for i, name in enumerate(self.names))
        reader = pa.RecordBatchReader.from_batches(self._schema, _keeping(batches, raised))
        self._con.register("stream", _stream(reader))
        try:
            self._con.execute(f"COPY (SELECT {columns} FROM stream) TO {_literal(str(path))} (FORMAT parquet)")
        except duckdb.Error as exc:
            if raised:
                raise raised[0] from None
            raise self._refused(exc, "Parquet") from None
        finally:
            self._con.unregister("stream")

    def require_unique_names(self, fmt: str) -> None:
        seen: set[str] = set()
        for name in self.names:
            if name in seen:
                raise TypeRefused(
                    f"the result has two columns named {name!r}, and {fmt} needs each name once: rename one in "
                    f"the query (… AS {name}_2)"
                )
            seen.add(name)

    def _select(self, batch: pa.RecordBatch | pa.Table, sql: str) -> pa.Table:
        self._con.register("batch", _stream(positional(batch)))
        try:
            return self._con.execute(sql).to_arrow_table()
        except duckdb.Error as exc:
            raise self._refused(exc, "text") from None

    def _text_expression(self, i: int) -> str:
        kind = self._ids[i]
        if kind in NESTED:
            return f"to_json(c{i})::VARCHAR"
        return f"to_base64(c{i})" if kind == "blob" else f"c{i}::VARCHAR"

    def _json_expression(self, i: int) -> str:
        return f"to_base64(c{i})" if self._ids[i] == "blob" else f"c{i}"

    def _parquet_expression(self, i: int) -> str:
        if self._ids[i] in WIDE_INTEGERS:
            return f"CAST(c{i} AS DECIMAL(38,0))"
        if _FIXED_SIZE.search(self.types[i]):  # pyarrow cannot read back DuckDB's fixed-size arrays
            return f"CAST(c{i} AS {_FIXED_SIZE.sub('[]', self.types[i])})"
        return f"c{i}"

    def _refused(self, exc: duckdb.Error, fmt: str) -> TypeRefused:
        """A conversion DuckDB refused, naming the column (DuckDB names its position) and a cast."""
        found = _SOURCE_COLUMN.search(str(exc))
        i = int(found.group(1)) if found else None
        if i is None or i >= len(self.names):
            return TypeRefused(f"the result cannot be written as {fmt}: {exc}")
        name, kind = self.names[i], self.types[i]
        held = " (Parquet holds DECIMAL(38,0) at most)" if self._ids[i] in WIDE_INTEGERS else ""
        return TypeRefused(
            f"column {name!r} ({kind}) holds a value {fmt} cannot hold{held}: cast it in the query, e.g. "
            f"CAST({quoted(name)} AS VARCHAR)"
        )


def _keeping(batches: Iterable[pa.RecordBatch], raised: list[BaseException]) -> Iterator[pa.RecordBatch]:
    """`batches` renamed by position; an exception raised by them is kept in `raised` before it
    goes on (DuckDB, which reads them, reports it only as text)."""
    try:
        for batch in batches:
            yield positional(batch)
    except BaseException as exc:
        raised.append(exc)
        raise


def _stream(data: pa.Table | pa.RecordBatch | pa.RecordBatchReader) -> object:
    """`data` as an Arrow C stream, read once. DuckDB scans a pyarrow object through
    pyarrow.dataset, which imports pandas (0.4 s of every `viewmill sql`); a bare stream it reads as is."""
    return data.__arrow_c_stream__()


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"
