"""A lake's writes: writers taking turns, transactions, full disks, appends.

Every file a transaction writes is hashed and recorded before it commits (and again, with
its catalog id, after), so what viewmill wrote can be told from what changed since, even
when the process dies right after a commit.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
from viewmill.storage.catalog import Catalog, LakeError, lost_connection
from viewmill.storage.crash_points import crash_point
from viewmill.storage.file_hashes import record_files, record_written
from viewmill.storage.lake_files import FolderWatch, catalog_files, next_file_id, remove_rolled_back_files
from viewmill.storage.schema import KEY_SOURCES
from viewmill.storage.writer_lock import WriterLock


class WriterTurns:
    """One lake connection's writes: the writer lock taken once however deeply writes nest,
    transactions, and the files each turn's commits added hashed and recorded."""

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        lock: WriterLock,
        catalog: Catalog,
        root: Path,
        data_path: str,
        *,
        read_only: bool,
        signing_key: Callable[[], bytes],
    ) -> None:
        self.con, self.lock, self.catalog, self.root, self.data_path = con, lock, catalog, root, data_path
        self.read_only = read_only
        self._signing_key = signing_key
        self._depth = 0
        self.seconds = 0.0  # in turns (writes, commits, hashes recorded): `Lake.busy_seconds`
        self._in_transaction = False
        self._recorded_before_commit: set[str] = set()  # files `_record_written` recorded
        self._unhashed_from = 0  # files numbered from here on have no recorded hash yet
        self._folders = FolderWatch(data_path)  # finds a transaction's files without listing the lake
        self._all_recorded = False  # the turn was one transaction, recorded after its commit
        self._in_sqlite = catalog.kind == "sqlite"  # its own indexes find a commit's new files

    @property
    def active(self) -> bool:
        return self._depth > 0

    def raise_if_disk_full(self, exc: BaseException) -> None:
        raise_if_disk_full(exc, self.root, self.catalog, self.data_path)

    @contextmanager
    def turn(self, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
        """Hold the writer lock (taken by the outermost turn); record the new files when it ends."""
        if self.read_only:
            raise LakeError("this lake was opened read-only; open it without read_only to write")
        self._depth += 1
        if self._depth == 1:
            began = time.perf_counter()
            self._take_lock(on_wait)
        failed = True
        try:
            yield
            failed = False
        finally:
            self._depth -= 1
            if self._depth == 0:
                try:
                    if not self._all_recorded:
                        self._record_new_files()  # statements that committed on their own
                except Exception:
                    if not failed:  # else the first error is the one to see; verify names the file
                        raise
                finally:
                    self._all_recorded = False
                    self.lock.release()
                    self.seconds += time.perf_counter() - began

    def _take_lock(self, on_wait: Callable[[], None] | None) -> None:
        try:
            self.lock.acquire(on_wait)
            # Under the lock no other writer commits: every file added from here on is ours.
            self._unhashed_from = next_file_id(self.con, in_sqlite=self._in_sqlite)
        except BaseException as exc:
            self._depth -= 1
            self.lock.release()
            self.raise_if_disk_full(exc)  # the lock file cannot be made: a read-only or full disk
            raise

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """All writes inside commit together or not at all, and no other writer commits in between.
        A transaction opened inside another joins it (commits or rolls back with it)."""
        if self._in_transaction:
            yield
            return
        with self.turn():
            opened = time.time_ns()
            began = opened - 1_000_000_000  # a second's slack for coarse file times (rolling back)
            self.con.execute("BEGIN TRANSACTION")
            self._in_transaction = True
            try:
                yield
            except BaseException as exc:
                self._in_transaction = False
                self._roll_back(began)
                self.raise_if_disk_full(exc)
                raise
            self._in_transaction = False
            try:
                self._record_written(opened)
            except BaseException as exc:
                self._roll_back(began)
                self.raise_if_disk_full(exc)
                raise
            try:
                self.con.execute("COMMIT")
            except duckdb.Error as exc:
                self.raise_if_disk_full(exc)
                raise
            crash_point("committed")
            self._record_new_files()
            self._all_recorded = self._depth == 1  # nothing else ran in this turn (a catalog query saved)

    def _record_written(self, since_ns: int) -> None:
        """Record the Parquet files this transaction wrote (local data paths; only the writer
        holding the lock writes), so a kill between COMMIT and `_record_new_files` leaves no
        committed file unvouched for. An s3:// data path is recorded after the commit only."""
        written = self._folders.written_since(since_ns)
        if written:  # a coarse file time may hide one: then the record after the commit has it
            record_written(self.con, self.data_path, written, self._signing_key())
            self._recorded_before_commit.update(written)

    def _roll_back(self, began: int) -> None:
        with contextlib.suppress(duckdb.Error):  # a failed COMMIT may have ended it already
            self.con.execute("ROLLBACK")
        with contextlib.suppress(duckdb.Error, OSError):  # a leftover is reported by verify
            remove_rolled_back_files(self.con, self.data_path, began)

    def _record_new_files(self) -> None:
        """Hash the files that commits since the lock was taken added, and record them."""
        upto = next_file_id(self.con, in_sqlite=self._in_sqlite)
        if upto <= self._unhashed_from:
            return
        added = catalog_files(self.con, self.data_path, from_id=self._unhashed_from, in_sqlite=self._in_sqlite)
        new = [f for f in added if f.file_id < upto and f.rel not in self._recorded_before_commit]
        if new:
            try:
                record_files(self.con, self.data_path, new, self._signing_key())
            except (OSError, duckdb.Error) as exc:
                raise LakeError(
                    f"the write to the lake at {self.root} committed, but the content hashes of its {len(new)} new "
                    f"file(s) could not be recorded ({exc}): fix that (df -h), check the lake with `viewmill lake "
                    "verify`, then trust those files with `viewmill lake verify --record-hashes`"
                ) from None
        self._unhashed_from = upto


def raise_if_disk_full(exc: BaseException, root: Path, catalog: Catalog, data_path: str) -> None:
    """Raise a LakeError naming the fix when `exc` came from a full disk, a read-only lake
    directory or a PostgreSQL catalog whose server went away; else return."""
    full = (isinstance(exc, OSError) and exc.errno == errno.ENOSPC) or any(
        sign in str(exc).lower() for sign in ("no space left on device", "database or disk is full")
    )
    # SQLite says only "disk I/O error" when a full disk stops its WAL index from growing.
    if not full and "disk i/o error" in str(exc).lower() and root.is_dir():
        full = shutil.disk_usage(root).free < 1 << 20
    read_only_dir = root.is_dir() and not os.access(root, os.W_OK)
    if not full and read_only_dir and isinstance(exc, duckdb.Error | OSError):
        raise LakeError(
            f"the lake directory {root} is read-only (the SQLite catalog needs to write even to be read): "
            "make it writable, or copy the state directory somewhere writable and point --state-dir there"
        ) from None
    if full:
        where = f"{root} (catalog {catalog.target}, data {data_path})"
        raise LakeError(
            f"no space left on device while writing the lake at {where}: the write was rolled back and the "
            "lake keeps its last commit; free space there (df -h) or move the state directory to a larger disk"
        ) from None
    lost = lost_connection(catalog, exc)
    if lost is not None:
        raise lost from None


def conformed(
    rows: pa.Table | pa.RecordBatchReader, schema: pa.Schema, error: list[BaseException]
) -> pa.Table | pa.RecordBatchReader | None:
    """The rows cast to the table's schema (None for an empty table); a reader stays streamed,
    and what its source raises is kept in `error`."""
    if isinstance(rows, pa.Table):
        return rows.select(schema.names).cast(schema) if rows.num_rows else None
    return pa.RecordBatchReader.from_batches(schema, _conformed_batches(rows, schema, error))


def _conformed_batches(
    rows: Iterable[pa.RecordBatch], schema: pa.Schema, error: list[BaseException]
) -> Iterator[pa.RecordBatch]:
    """The batches cast to the table's schema; an error raised while producing them is kept in
    `error` (DuckDB reports it only as text) before it ends the stream."""
    try:
        for batch in rows:
            yield batch.select(schema.names).cast(schema)
    except BaseException as exc:
        error.append(exc)
        raise


def insert_rows(
    con: duckdb.DuckDBPyConnection,
    table: str,
    incoming: pa.Table | pa.RecordBatchReader,
    columns: Sequence[str],
    unique_on: Sequence[str],
    source_error: list[BaseException],
) -> int:
    """INSERT `incoming` into `table` (with `unique_on`, only keys it lacks); the rows inserted."""
    names = ", ".join(columns)
    params: list[Any] = []
    if unique_on:
        keys = ", ".join(unique_on)
        where, params = key_range(table, incoming, unique_on)
        existing = f"(SELECT {keys} FROM {table} WHERE {where})"
        source = f"(SELECT DISTINCT ON ({keys}) * FROM _incoming) AS s ANTI JOIN {existing} USING ({keys})"
    else:
        source = "_incoming"
    con.register("_incoming", incoming)
    try:
        count = con.execute(f"INSERT INTO {table} ({names}) SELECT {names} FROM {source}", params).fetchone()
    except duckdb.Error:
        if source_error:
            raise source_error[0] from None  # the stream's own error, not DuckDB's wrapping of it
        raise
    finally:
        con.unregister("_incoming")
    return int(count[0]) if count else 0


def key_range(table: str, incoming: pa.Table | pa.RecordBatchReader, unique_on: Sequence[str]) -> tuple[str, list[Any]]:
    """A WHERE clause (and its parameters) that keeps every existing row whose key the incoming
    rows may repeat: the min/max of the columns the key is a hash of (`KEY_SOURCES`), so a
    commit reads the files of its own partition and sentence range, not the whole table."""
    if not isinstance(incoming, pa.Table):  # a stream is read once, by the INSERT
        return "true", []
    sources = KEY_SOURCES.get(table, {})
    clauses, params = ["true"], []
    for column in sorted({column for key in unique_on for column in sources.get(key, ())}):
        values = incoming.column(column)
        if values.null_count:  # a null lies in no range
            continue
        import pyarrow.compute as pc  # here: `viewmill sql` opens a lake without it (0.1-0.2 s of imports)

        bounds = pc.min_max(values)
        clauses.append(f"{column} BETWEEN ? AND ?")
        params += [bounds["min"].as_py(), bounds["max"].as_py()]
    return " AND ".join(clauses), params
