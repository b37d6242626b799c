"""The lake: Parquet data files under a DuckLake catalog, opened through DuckDB.

Every write is a transaction, so a failed stage leaves no half-written state, and
every commit is a DuckLake snapshot that can be time-travelled to.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pyarrow as pa

from storage.schema import TABLES

CATALOG_NAME = "lake"


class LakeError(RuntimeError):
    """The lake cannot be opened or written; the message says why and what to do."""


def ducklake_extension_path() -> Path:
    """The DuckLake extension shipped by the `duckdb-extension-ducklake` wheel (no download)."""
    try:
        import duckdb_extension_ducklake
    except ImportError as exc:  # pragma: no cover - install problem
        raise LakeError(
            f"the DuckLake extension is not installed: pip install duckdb-extension-ducklake=={duckdb.__version__}"
        ) from exc
    path = (
        Path(duckdb_extension_ducklake.__file__).parent
        / "extensions"
        / f"v{duckdb.__version__}"
        / "ducklake.duckdb_extension"
    )
    if not path.exists():
        raise LakeError(
            f"no DuckLake extension for duckdb {duckdb.__version__} at {path}: install "
            f"duckdb-extension-ducklake=={duckdb.__version__} (versions must match exactly)"
        )
    return path


def _sql_literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


class Lake:
    """A DuckLake-backed lake rooted at a directory (catalog file + Parquet data)."""

    def __init__(self, root: Path | str, *, read_only: bool = False) -> None:
        self.root = Path(root)
        self.read_only = read_only
        self.catalog_path = self.root / "catalog.ducklake"
        self.data_path = self.root / "data"
        if read_only and not self.catalog_path.exists():
            raise LakeError(
                f"no lake at {self.root}: run a recipe first (viewmill run recipes/demo.yaml) "
                "or point --state-dir at an existing state directory"
            )
        if not read_only:
            self.data_path.mkdir(parents=True, exist_ok=True)
        self.con = duckdb.connect(config={"threads": max(1, os.cpu_count() or 1)})
        self.con.execute(f"LOAD {_sql_literal(str(ducklake_extension_path()))}")
        options = (
            ["READ_ONLY"]
            if read_only
            else [
                f"DATA_PATH {_sql_literal(str(self.data_path) + '/')}",
                # Small commits still become Parquet files, so the data stays plain Parquet.
                "DATA_INLINING_ROW_LIMIT 0",
            ]
        )
        try:
            self.con.execute(
                f"ATTACH {_sql_literal('ducklake:' + str(self.catalog_path))} AS {CATALOG_NAME} ({', '.join(options)})"
            )
        except duckdb.IOException as exc:
            self.con.close()
            if "lock" in str(exc).lower():
                raise LakeError(
                    f"the lake at {self.root} is locked by another process (a run in progress?): "
                    "wait for it to finish and try again"
                ) from exc
            raise
        self.con.execute(f"USE {CATALOG_NAME}")
        if not read_only:
            self._create_tables()

    def _create_tables(self) -> None:
        existing = {row[0] for row in self.con.execute("SHOW TABLES").fetchall()}
        for name, schema in TABLES.items():
            if name in existing:
                continue
            empty = pa.Table.from_pylist([], schema=schema)
            self.con.register("_empty", empty)
            self.con.execute(f"CREATE TABLE {name} AS SELECT * FROM _empty LIMIT 0")
            self.con.unregister("_empty")

    # -- lifecycle -----------------------------------------------------------------
    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> Lake:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """All writes inside commit together or not at all."""
        self.con.execute("BEGIN TRANSACTION")
        try:
            yield
        except BaseException:
            self.con.execute("ROLLBACK")
            raise
        self.con.execute("COMMIT")

    # -- writes --------------------------------------------------------------------
    def append(self, table: str, rows: pa.Table, unique_on: Sequence[str] = ()) -> int:
        """Append rows, conformed to the table's schema; with `unique_on`, only new keys.

        Returns the number of rows inserted.
        """
        if rows.num_rows == 0:
            return 0
        schema = TABLES[table]
        rows = rows.select(schema.names).cast(schema)
        columns = ", ".join(schema.names)
        self.con.register("_incoming", rows)
        try:
            if unique_on:
                keys = ", ".join(unique_on)
                source = f"(SELECT DISTINCT ON ({keys}) * FROM _incoming) AS s ANTI JOIN {table} USING ({keys})"
            else:
                source = "_incoming"
            inserted = self.con.execute(f"INSERT INTO {table} ({columns}) SELECT {columns} FROM {source}").fetchone()
        finally:
            self.con.unregister("_incoming")
        return int(inserted[0]) if inserted else 0

    # -- reads ---------------------------------------------------------------------
    def arrow(self, sql: str, params: Sequence[Any] | None = None) -> pa.Table:
        result = self.con.execute(sql, params or [])
        return result.to_arrow_table()

    def polars(self, sql: str, params: Sequence[Any] | None = None) -> pl.DataFrame:
        return pl.from_arrow(self.arrow(sql, params))

    def scalar(self, sql: str, params: Sequence[Any] | None = None) -> Any:
        row = self.con.execute(sql, params or []).fetchone()
        return row[0] if row else None

    def with_keys(self, name: str, keys: pa.Table) -> _Registered:
        """Register an Arrow table (e.g. a list of keys) for use in a join."""
        return _Registered(self.con, name, keys)

    def version(self) -> int:
        """The current DuckLake snapshot id: the lake's version for time travel."""
        return int(self.scalar(f"SELECT max(snapshot_id) FROM ducklake_snapshots('{CATALOG_NAME}')"))


class _Registered:
    def __init__(self, con: duckdb.DuckDBPyConnection, name: str, table: pa.Table) -> None:
        self.con, self.name = con, name
        con.register(name, table)

    def __enter__(self) -> str:
        return self.name

    def __exit__(self, *exc: object) -> None:
        self.con.unregister(self.name)
