"""The lake: Parquet data files under a DuckLake catalog, opened through DuckDB.

Every write is a transaction, so a failed stage leaves no half-written state, and
every commit is a DuckLake snapshot that can be time-travelled to.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
import pyarrow as pa
from viewmill.storage.catalog import (
    CATALOG_ENV,
    DATA_PATH_ENV,
    Catalog,
    LakeError,
    check_not_orphaned,
    data_files,
    extension_path,
    redact,
    refuse_orphaned_data,
    require_catalog,
    s3_secret_sql,
    sql_literal,
)
from viewmill.storage.duckdb_instances import Instance, lend
from viewmill.storage.file_hashes import HashRecords, content_problems, read_records, refusal
from viewmill.storage.lake_files import CatalogFile, catalog_files, merge_candidates
from viewmill.storage.lake_key import reader_key, settled_key, writer_key
from viewmill.storage.lake_setup import CATALOG_NAME, attach_catalog, create_tables, lake_extensions, tables_current
from viewmill.storage.lake_writes import WriterTurns, conformed, insert_rows, raise_if_disk_full
from viewmill.storage.schema import TABLES
from viewmill.storage.writer_lock import WriterLock

if TYPE_CHECKING:
    import polars as pl

    from viewmill.settings import Settings

# The lake's public names; those defined in `catalog`, `lake_setup` and `writer_lock` stay importable from here.
__all__ = [
    "CATALOG_ENV", "CATALOG_NAME", "DATA_PATH_ENV", "Catalog", "Lake", "LakeError", "WriterLock",
    "check_not_orphaned", "data_files", "extension_path", "redact", "refuse_orphaned_data", "s3_secret_sql",
]  # fmt: skip


class Lake:
    """A DuckLake: Parquet data files (local or s3://) under a catalog (SQLite, DuckDB or PostgreSQL).

    `root` holds the local catalog file and, unless `data_path` says otherwise, the data.
    Readers see committed snapshots and never wait for a writer (SQLite and PostgreSQL
    catalogs); writers take turns through `WriterLock` (`lake_writes.WriterTurns`).
    """

    def __init__(
        self,
        root: Path | str,
        *,
        read_only: bool = False,
        catalog: str | None = None,
        data_path: str | None = None,
    ) -> None:
        self.root = Path(root)
        self.read_only = read_only
        self.catalog = Catalog.parse(catalog, self.root)
        explicit_data = data_path or os.environ.get(DATA_PATH_ENV)
        self.data_path = explicit_data or str(self.root / "data")
        require_catalog(self.catalog, self.data_path, self.root, read_only=read_only)
        if not read_only:
            self.root.mkdir(parents=True, exist_ok=True)
            if not self.data_path.startswith("s3://") and not self.catalog.exists():
                Path(self.data_path).mkdir(parents=True, exist_ok=True)
        self._lock = WriterLock(self.catalog, self.root)
        self._key: bytes | None = None
        self._read_s = 0.0  # in reads outside write turns: `busy_seconds`
        self._instance: Instance | None = None
        try:
            self._instance = lend(lake_extensions(self.catalog, self.data_path))
            self.con = self._instance.con
            self._open(explicit_data=bool(explicit_data))
        except BaseException as exc:
            self.close()
            raise_if_disk_full(exc, self.root, self.catalog, self.data_path)
            raise

    def _open(self, *, explicit_data: bool) -> None:
        """Attach the catalog; a writer creates or migrates the tables and settles the signing key."""
        self.data_path = attach_catalog(
            self.con, self.catalog, self.root, self.data_path, read_only=self.read_only, explicit_data=explicit_data
        )
        self._turns = WriterTurns(
            self.con, self._lock, self.catalog, self.root, self.data_path,
            read_only=self.read_only, signing_key=self.signing_key,
        )  # fmt: skip
        if not self.read_only and not self._is_set_up():
            with self._turns.turn():
                create_tables(self.con)
                self._key = writer_key(self.con, self.root, self.data_path)

    def _is_set_up(self) -> bool:
        """Whether every table and column exist and the catalog names the key file's key: opening
        such a lake takes no writer lock, so a process waits for the lock only where it writes."""
        if not tables_current(self.con):
            return False
        self._key = settled_key(self.con, self.root)
        return self._key is not None

    # -- lifecycle -----------------------------------------------------------------
    def close(self) -> None:
        instance, self._instance = self._instance, None
        if instance is not None:
            instance.give_back()
        self._lock.close()

    def __enter__(self) -> Lake:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def writing(self, on_wait: Callable[[], None] | None = None) -> contextlib.AbstractContextManager[None]:
        """Hold the writer lock over several steps (verify then repair): no writer commits between
        them; `on_wait` is called first when another writer holds it now."""
        return self._turns.turn(on_wait)

    def transaction(self) -> contextlib.AbstractContextManager[None]:
        """All writes inside commit together or not at all, and no other writer commits in between.
        A transaction opened inside another joins it (commits or rolls back with it)."""
        return self._turns.transaction()

    # -- integrity -----------------------------------------------------------------
    def signing_key(self) -> bytes:
        """The key this lake's hash records are signed with (a writable lake makes it on open)."""
        if self._key is None:
            raise LakeError("this lake was opened read-only; open it without read_only to record hashes")
        return self._key

    def hash_records(self) -> HashRecords:
        """What the lake's hash record says of its files (signed by this lake's key only)."""
        key = self._key if self._key is not None else reader_key(self.con, self.root, self.data_path)
        return read_records(self.con, self.data_path, key)

    def require_intact(self, tables: Sequence[str], purpose: str) -> None:
        """Refuse (LakeError, naming the file and the fix) when a current file of `tables` is
        missing, changed since viewmill wrote it, or has no recorded hash: what `purpose`
        (e.g. "pair views") would read must be what viewmill wrote."""
        files = [f for f in catalog_files(self.con, self.data_path, tables=tuple(tables)) if f.current]
        self._refuse_untrusted(files, purpose)

    def _refuse_untrusted(self, files: list[CatalogFile], purpose: str) -> None:
        problems = content_problems(self.con, files, self.hash_records())
        if problems:
            raise LakeError(refusal(problems, purpose))

    # -- writes --------------------------------------------------------------------
    def append(self, table: str, rows: pa.Table | pa.RecordBatchReader, unique_on: Sequence[str] = ()) -> int:
        """Append rows, conformed to the table's schema; with `unique_on`, only new keys.

        A RecordBatchReader is streamed: DuckDB pulls batches as it writes Parquet, so
        memory stays flat however many rows come. Returns the number of rows inserted.
        """
        schema = TABLES[table]
        source_error: list[BaseException] = []  # what a streamed source raised, if it failed
        incoming = conformed(rows, schema, source_error)
        if incoming is None:
            return 0
        with self._turns.turn():
            return insert_rows(self.con, table, incoming, schema.names, unique_on, source_error)

    def compact(self) -> None:
        """Merge the small Parquet files that chunked commits leave into larger ones. The files
        a merge may read are checked against their recorded hashes first: a changed file's
        rows must not come out of the merge in a new file with a fresh, trusted hash."""
        with self._turns.turn():
            self._refuse_untrusted(merge_candidates(catalog_files(self.con, self.data_path)), "compact the lake")
            self.con.execute(f"CALL ducklake_merge_adjacent_files({sql_literal(CATALOG_NAME)})")

    # -- reads ---------------------------------------------------------------------
    def arrow(self, sql: str, params: Sequence[Any] | None = None) -> pa.Table:
        with self._reading():
            return self.con.execute(sql, params or []).to_arrow_table()

    def batches(self, sql: str, params: Sequence[Any] | None = None, rows: int = 65_536) -> Iterator[pa.RecordBatch]:
        """The result `rows` at a time, so a large one never sits in memory whole (read every
        batch before the next query on this lake)."""
        with self._reading():
            yield from self.con.execute(sql, params or []).to_arrow_reader(rows)

    def polars(self, sql: str, params: Sequence[Any] | None = None) -> pl.DataFrame:
        import polars as pl  # not at the top: `viewmill sql` opens a lake and never needs polars

        return pl.from_arrow(self.arrow(sql, params))

    def scalar(self, sql: str, params: Sequence[Any] | None = None) -> Any:
        with self._reading():
            row = self.con.execute(sql, params or []).fetchone()
        return row[0] if row else None

    @contextlib.contextmanager
    def _reading(self) -> Iterator[None]:
        began = time.perf_counter()
        try:
            yield
        finally:
            if not self._turns.active:  # a turn's own clock counts reads inside it
                self._read_s += time.perf_counter() - began

    def busy_seconds(self) -> float:
        """Seconds this connection has spent in the lake (reads, writes, commits): what the
        work between commits is weighed against (`augment.commit_sizes`)."""
        return self._read_s + self._turns.seconds

    def with_keys(self, name: str, keys: pa.Table) -> _Registered:
        """Register an Arrow table (e.g. a list of keys) for use in a join."""
        return _Registered(self.con, name, keys)

    def created_at(self) -> str:
        """When the lake's catalog was created: tells a lake from one made anew at the same place."""
        first = self.scalar(f"SELECT min(snapshot_time) FROM ducklake_snapshots('{CATALOG_NAME}')")
        return str(first)

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


def open_lake(settings: Settings, root: Path | str, *, read_only: bool = False) -> Lake:
    """The lake at `root` under `settings`' catalog and data path."""
    return Lake(root, read_only=read_only, catalog=settings.catalog_spec(), data_path=settings.data_path)
