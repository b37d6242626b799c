"""The lake: Parquet data files under a DuckLake catalog, opened through DuckDB.

Every write is a transaction, so a failed stage leaves no half-written state, and
every commit is a DuckLake snapshot that can be time-travelled to.
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
    lost_connection,
    recorded_data_path,
    redact,
    refuse_orphaned_data,
    s3_secret_sql,
    sql_literal,
)
from viewmill.storage.file_hashes import HashRecords, content_problems, read_records, record_files, refusal
from viewmill.storage.lake_files import (
    CatalogFile,
    catalog_files,
    merge_candidates,
    next_file_id,
    remove_rolled_back_files,
)
from viewmill.storage.lake_key import reader_key, settled_key, writer_key
from viewmill.storage.schema import JSON, PARTITIONS, TABLES
from viewmill.storage.writer_lock import WriterLock

if TYPE_CHECKING:
    import polars as pl

    from viewmill.settings import Settings

# The lake's public names; those defined in `catalog` and `writer_lock` stay importable from here.
__all__ = [
    "CATALOG_ENV", "CATALOG_NAME", "DATA_PATH_ENV", "Catalog", "Lake", "LakeError", "WriterLock",
    "check_not_orphaned", "data_files", "extension_path", "redact", "refuse_orphaned_data", "s3_secret_sql",
]  # fmt: skip

CATALOG_NAME = "lake"
JSON_COLUMNS = [(name, field.name) for name, schema in TABLES.items() for field in schema if field.type == JSON]


class Lake:
    """A DuckLake: Parquet data files (local or s3://) under a catalog (SQLite, DuckDB or PostgreSQL).

    `root` holds the local catalog file and, unless `data_path` says otherwise, the data.
    Readers see committed snapshots and never wait for a writer (SQLite and PostgreSQL
    catalogs); writers take turns through `WriterLock`.
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
        self._explicit_data = data_path or os.environ.get(DATA_PATH_ENV)
        self.data_path = self._explicit_data or str(self.root / "data")
        if not self.catalog.exists():
            refuse_orphaned_data(self.catalog, self.data_path)
        if read_only and not self.catalog.exists():
            raise LakeError(
                f"no lake at {self.root}: run a recipe first (viewmill run recipes/demo.yaml) "
                "or point --state-dir at an existing state directory"
            )
        if not read_only:
            self.root.mkdir(parents=True, exist_ok=True)
            if not self.data_path.startswith("s3://") and not self.catalog.exists():
                Path(self.data_path).mkdir(parents=True, exist_ok=True)
        self._lock = WriterLock(self.catalog, self.root)
        self._lock_depth = 0
        self._in_transaction = False
        self._unhashed_from = 0  # files numbered from here on have no recorded hash yet
        self._key: bytes | None = None
        # Rows carry their own keys and every read that needs an order says ORDER BY, so
        # DuckDB need not buffer large inserts to keep their order (less memory).
        self.con = duckdb.connect(config={"threads": max(1, os.cpu_count() or 1), "preserve_insertion_order": False})
        try:
            self._attach()
            if not read_only and not self._is_set_up():
                with self._writing():
                    self._create_tables()
                    self._key = writer_key(self.con, self.root, self.data_path)
        except BaseException as exc:
            self.close()
            self._raise_if_disk_full(exc)
            raise

    def _attach(self) -> None:
        for name in ("ducklake", self.catalog.extension):
            if name:
                self.con.execute(f"LOAD {sql_literal(str(extension_path(name)))}")
        if self.data_path.startswith("s3://"):
            self.con.execute(f"LOAD {sql_literal(str(extension_path('httpfs')))}")
            self.con.execute(s3_secret_sql())
        if self.catalog.password is not None:  # libpq gets it from a (temporary, redacted) DuckDB secret
            secret = sql_literal(self.catalog.password.get_secret_value())
            # The default postgres secret: the one an ATTACH without its own SECRET option uses.
            sql = f"CREATE OR REPLACE TEMPORARY SECRET __default_postgres (TYPE postgres, PASSWORD {secret})"
            self.con.execute(sql)
        # Small commits still become Parquet files, so the data stays plain Parquet.
        options = ["READ_ONLY"] if self.read_only else ["DATA_INLINING_ROW_LIMIT 0"]
        if self.catalog.kind == "sqlite":
            # WAL: a reader never makes a writer's COMMIT fail with "database is locked"; the
            # busy timeout covers the catalog's own short locks (writers take turns anyway).
            options += ["META_BUSY_TIMEOUT 60000"] + ([] if self.read_only else ["META_JOURNAL_MODE 'WAL'"])
        try:
            self._attach_with_data_path(options)
        except (duckdb.IOException, duckdb.CatalogException, duckdb.InvalidInputException) as exc:
            if "lock" in str(exc).lower():
                raise LakeError(
                    f"the lake at {self.root} is locked by another process (a run in progress with a duckdb "
                    "catalog?): wait for it to finish, or use the sqlite catalog, which lets readers in"
                ) from exc
            raise LakeError(f"cannot open the lake catalog {self.catalog.uri}: {redact(str(exc))}") from None
        self.con.execute(f"USE {CATALOG_NAME}")

    def _attach_with_data_path(self, options: list[str]) -> None:
        """Attach with this lake's own data folder. The catalog records the absolute path the
        lake was made at; a lake that was moved, copied or restored elsewhere keeps its data
        in `<root>/data`, so that folder overrides the recorded one and the copy reads and
        writes only its own files."""
        attach = f"ATTACH {sql_literal(self.catalog.uri)} AS {CATALOG_NAME}"
        data = self.data_path.rstrip("/") + "/"
        try:
            self.con.execute(f"{attach} ({', '.join([*options, f'DATA_PATH {sql_literal(data)}'])})")
            return
        except duckdb.Error as exc:  # DuckLake raises a plain Error for a data path mismatch
            recorded = recorded_data_path(str(exc))
            if recorded is None:
                raise
        if self._explicit_data:
            raise LakeError(
                f"the catalog {self.catalog.target} records its data at {recorded} but {DATA_PATH_ENV} (or "
                f"--data-path) says {data}: point it at the lake's data, or unset it to use the recorded path"
            )
        own = Path(self.data_path)
        # A local catalog lives in `root`: when `root/data` holds files, catalog and data moved
        # together. A PostgreSQL catalog is shared, so its recorded path is the truth.
        if self.catalog.kind != "postgres" and own.is_dir() and any(own.iterdir()):
            override = [*options, f"DATA_PATH {sql_literal(data)}", "OVERRIDE_DATA_PATH true"]
            self.con.execute(f"{attach} ({', '.join(override)})")
        else:  # made with its data elsewhere (another folder, s3://): use the recorded path
            self.con.execute(f"{attach} ({', '.join(options)})")
            self.data_path = recorded

    def _is_set_up(self) -> bool:
        """Whether every table and column exist and the catalog names the key file's key: opening
        such a lake takes no writer lock, so a process waits for the lock only where it writes."""
        sql = "SELECT table_name, column_name, data_type FROM duckdb_columns() WHERE database_name = ?"
        have = {(table, column): kind for table, column, kind in self.con.execute(sql, [CATALOG_NAME]).fetchall()}
        if not {(name, field.name) for name, schema in TABLES.items() for field in schema} <= have.keys():
            return False
        if any(have[column] != "JSON" for column in JSON_COLUMNS):
            return False
        self._key = settled_key(self.con, self.root)
        return self._key is not None

    def _create_tables(self) -> None:
        existing = {row[0] for row in self.con.execute("SHOW TABLES").fetchall()}
        for name, schema in TABLES.items():
            if name in existing:
                self._add_missing_columns(name, schema)
                self._alter_to_json(name)
                continue
            empty = pa.Table.from_pylist([], schema=schema)
            self.con.register("_empty", empty)
            self.con.execute(f"CREATE TABLE {name} AS SELECT * FROM _empty LIMIT 0")
            self.con.unregister("_empty")
            if name in PARTITIONS:
                self.con.execute(f"ALTER TABLE {name} SET PARTITIONED BY ({', '.join(PARTITIONS[name])})")

    def _add_missing_columns(self, name: str, schema: pa.Schema) -> None:
        """Columns added to a table's schema since an existing lake was made (empty there)."""
        have = {row[0] for row in self.con.execute(f"DESCRIBE {name}").fetchall()}
        missing = [field for field in schema if field.name not in have]
        if not missing:
            return
        self.con.register("_empty", pa.Table.from_pylist([], schema=pa.schema(missing)))
        try:
            types = dict(self.con.execute("SELECT column_name, column_type FROM (DESCRIBE _empty)").fetchall())
        finally:
            self.con.unregister("_empty")
        for field in missing:
            self.con.execute(f"ALTER TABLE {name} ADD COLUMN {field.name} {types[field.name]}")

    def _alter_to_json(self, name: str) -> None:
        """JSON columns an older lake holds as VARCHAR (runs.timings, runs.counts, models.train_config):
        DuckLake changes the type in the catalog only, and the old files' text reads as JSON."""
        types = dict(self.con.execute(f"SELECT column_name, column_type FROM (DESCRIBE {name})").fetchall())
        for table, column in JSON_COLUMNS:
            if table == name and types[column] == "VARCHAR":
                self.con.execute(f"ALTER TABLE {name} ALTER COLUMN {column} SET DATA TYPE JSON")

    # -- lifecycle -----------------------------------------------------------------
    def close(self) -> None:
        self.con.close()
        self._lock.close()

    def __enter__(self) -> Lake:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _writing(self, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
        if self.read_only:
            raise LakeError("this lake was opened read-only; open it without read_only to write")
        self._lock_depth += 1
        if self._lock_depth == 1:
            try:
                self._lock.acquire(on_wait)
                # Under the lock no other writer commits: every file added from here on is ours.
                self._unhashed_from = next_file_id(self.con)
            except BaseException as exc:
                self._lock_depth -= 1
                self._lock.release()
                self._raise_if_disk_full(exc)  # the lock file cannot be made: a read-only or full disk
                raise
        failed = True
        try:
            yield
            failed = False
        finally:
            self._lock_depth -= 1
            if self._lock_depth == 0:
                try:
                    self._record_new_files()  # statements that committed on their own
                except Exception:
                    if not failed:  # else the first error is the one to see; verify names the file
                        raise
                finally:
                    self._lock.release()

    def writing(self, on_wait: Callable[[], None] | None = None) -> contextlib.AbstractContextManager[None]:
        """Hold the writer lock over several steps (verify then repair): no writer commits between
        them; `on_wait` is called first when another writer holds it now."""
        return self._writing(on_wait)

    def _record_new_files(self) -> None:
        """Hash the files that commits since the lock was taken added, and record them."""
        upto = next_file_id(self.con)
        if upto <= self._unhashed_from:
            return
        added = catalog_files(self.con, self.data_path, from_id=self._unhashed_from)
        new = [f for f in added if f.file_id < upto]
        if new:
            try:
                record_files(self.con, self.data_path, new, self.signing_key())
            except (OSError, duckdb.Error) as exc:
                raise LakeError(
                    f"the write to the lake at {self.root} committed, but the content hashes of its {len(new)} new "
                    f"file(s) could not be recorded ({exc}): fix that (df -h), check the lake with `viewmill lake "
                    "verify`, then trust those files with `viewmill lake verify --record-hashes`"
                ) from None
        self._unhashed_from = upto

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

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """All writes inside commit together or not at all, and no other writer commits in between.
        A transaction opened inside another joins it (commits or rolls back with it)."""
        if self._in_transaction:
            yield
            return
        with self._writing():
            began = time.time_ns() - 1_000_000_000  # a second's slack for coarse file times
            self.con.execute("BEGIN TRANSACTION")
            self._in_transaction = True
            try:
                yield
            except BaseException as exc:
                self._in_transaction = False
                with contextlib.suppress(duckdb.Error):  # a failed COMMIT may have ended it already
                    self.con.execute("ROLLBACK")
                with contextlib.suppress(duckdb.Error, OSError):  # a leftover is reported by verify
                    remove_rolled_back_files(self.con, self.data_path, began)
                self._raise_if_disk_full(exc)
                raise
            self._in_transaction = False
            try:
                self.con.execute("COMMIT")
            except duckdb.Error as exc:
                self._raise_if_disk_full(exc)
                raise
            self._record_new_files()

    def _raise_if_disk_full(self, exc: BaseException) -> None:
        full = (isinstance(exc, OSError) and exc.errno == errno.ENOSPC) or any(
            sign in str(exc).lower() for sign in ("no space left on device", "database or disk is full")
        )
        # SQLite says only "disk I/O error" when a full disk stops its WAL index from growing.
        if not full and "disk i/o error" in str(exc).lower() and self.root.is_dir():
            full = shutil.disk_usage(self.root).free < 1 << 20
        read_only_dir = self.root.is_dir() and not os.access(self.root, os.W_OK)
        if not full and read_only_dir and isinstance(exc, duckdb.Error | OSError):
            raise LakeError(
                f"the lake directory {self.root} is read-only (the SQLite catalog needs to write even to be read): "
                "make it writable, or copy the state directory somewhere writable and point --state-dir there"
            ) from None
        if full:
            where = f"{self.root} (catalog {self.catalog.target}, data {self.data_path})"
            raise LakeError(
                f"no space left on device while writing the lake at {where}: the write was rolled back and the "
                "lake keeps its last commit; free space there (df -h) or move the state directory to a larger disk"
            ) from None
        lost = lost_connection(self.catalog, exc)  # and a PostgreSQL catalog whose server went away
        if lost is not None:
            raise lost from None

    # -- writes --------------------------------------------------------------------
    def append(self, table: str, rows: pa.Table | pa.RecordBatchReader, unique_on: Sequence[str] = ()) -> int:
        """Append rows, conformed to the table's schema; with `unique_on`, only new keys.

        A RecordBatchReader is streamed: DuckDB pulls batches as it writes Parquet, so
        memory stays flat however many rows come. Returns the number of rows inserted.
        """
        schema = TABLES[table]
        source_error: list[BaseException] = []  # what a streamed source raised, if it failed
        if isinstance(rows, pa.Table):
            if rows.num_rows == 0:
                return 0
            incoming: pa.Table | pa.RecordBatchReader = rows.select(schema.names).cast(schema)
        else:
            incoming = pa.RecordBatchReader.from_batches(schema, _conformed(rows, schema, source_error))
        columns = ", ".join(schema.names)
        if unique_on:
            keys = ", ".join(unique_on)
            source = f"(SELECT DISTINCT ON ({keys}) * FROM _incoming) AS s ANTI JOIN {table} USING ({keys})"
        else:
            source = "_incoming"
        with self._writing():
            self.con.register("_incoming", incoming)
            try:
                inserted = self.con.execute(f"INSERT INTO {table} ({columns}) SELECT {columns} FROM {source}")
                count = inserted.fetchone()
            except duckdb.Error:
                if source_error:
                    raise source_error[0] from None  # the stream's own error, not DuckDB's wrapping of it
                raise
            finally:
                self.con.unregister("_incoming")
        return int(count[0]) if count else 0

    def compact(self) -> None:
        """Merge the small Parquet files that chunked commits leave into larger ones. The files
        a merge may read are checked against their recorded hashes first: a changed file's
        rows must not come out of the merge in a new file with a fresh, trusted hash."""
        with self._writing():
            self._refuse_untrusted(merge_candidates(catalog_files(self.con, self.data_path)), "compact the lake")
            self.con.execute(f"CALL ducklake_merge_adjacent_files({sql_literal(CATALOG_NAME)})")

    # -- reads ---------------------------------------------------------------------
    def arrow(self, sql: str, params: Sequence[Any] | None = None) -> pa.Table:
        result = self.con.execute(sql, params or [])
        return result.to_arrow_table()

    def polars(self, sql: str, params: Sequence[Any] | None = None) -> pl.DataFrame:
        import polars as pl  # not at the top: `viewmill sql` opens a lake and never needs polars

        return pl.from_arrow(self.arrow(sql, params))

    def scalar(self, sql: str, params: Sequence[Any] | None = None) -> Any:
        row = self.con.execute(sql, params or []).fetchone()
        return row[0] if row else None

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


def _conformed(
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


def open_lake(settings: Settings, root: Path | str, *, read_only: bool = False) -> Lake:
    """The lake at `root` under `settings`' catalog and data path."""
    return Lake(root, read_only=read_only, catalog=settings.catalog_spec(), data_path=settings.data_path)
