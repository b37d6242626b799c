"""Ad hoc SQL over the lake (`viewmill sql`) that reads and does nothing else.

Three layers, because no one of them is enough alone:
1. a whitelist (`check`, `policy`): one statement, a plain query, every
   pragma, function and plan operator in it classified as a read;
2. a locked connection: no directory but the lake's data folder (allowed_directories), no
   temporary directory (nothing spills to disk), no extension loading, no Python replacement
   scans, every credential setting emptied (the S3 key lives in a redacted DuckDB secret only),
   then `lock_configuration`; the catalog attached read-only, and for a SQLite catalog, a
   private copy of it, so even DuckDB's own file access never holds the real catalog's path;
3. limits: a time limit (DuckDB's interrupt, from a timer, and a deadline checked between the
   result's batches) and a memory limit (DuckDB's, and batches sized from it).
Output files never land on the lake (`storage.output_paths.OutputGuard`).
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager, suppress
from pathlib import Path

import duckdb
import pyarrow as pa
from viewmill.storage.catalog import Catalog, LakeError, redact, sql_literal
from viewmill.storage.lake import Lake
from viewmill.storage.output_paths import OutputGuard, OutputRefused
from viewmill.storage.sql.check import QueryRefused, checked_query
from viewmill.storage.sql.limits import QueryLimitHit, QueryLimits
from viewmill.storage.sql.policy import CREDENTIAL_SETTINGS

__all__ = [
    "OutputRefused",
    "QueryLimitHit",
    "QueryLimits",
    "QueryRefused",
    "QueryStream",
    "open_query_lake",
    "query_stream",
    "stream_query",
]

# Where credentials come from, so that no message carries one even if DuckDB quotes it.
_CREDENTIAL_ENV = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID")


def lock_down(lake: Lake, memory: str = QueryLimits.memory) -> None:
    """Credentials emptied, files limited to the lake's data folder, nothing written, settings locked."""
    con = lake.con
    present = {row[0] for row in con.execute("SELECT name FROM duckdb_settings()").fetchall()}
    for setting in CREDENTIAL_SETTINGS:  # httpfs copies AWS_* variables into s3_* settings on load
        if setting in present:
            con.execute(f"SET {setting} = ''")
    # Literals, not parameters: a list parameter makes DuckDB import pandas (0.2 s of every `viewmill sql`).
    directories = ", ".join(sql_literal(folder) for folder in _data_directories(lake.data_path))
    con.execute(f"SET allowed_directories = [{directories}]")
    con.execute(f"SET memory_limit = {sql_literal(memory.strip())}")
    settings = {
        "temp_directory": "''", "autoinstall_known_extensions": "false", "autoload_known_extensions": "false",
        "allow_community_extensions": "false", "allow_unredacted_secrets": "false",
        "python_enable_replacements": "false", "enable_logging": "false",
        "arrow_lossless_conversion": "true",  # HUGEINT, UUID, TIME WITH TIME ZONE reach Python exactly
        "enable_external_access": "false",  # last but one: it also freezes the allowed paths
        "lock_configuration": "true",
    }  # fmt: skip
    for setting, value in settings.items():
        con.execute(f"SET {setting} = {value}")


def _data_directories(data_path: str) -> list[str]:
    if data_path.startswith("s3://"):
        return [data_path.rstrip("/") + "/"]
    named = Path(data_path)
    return sorted({str(named.absolute()).rstrip("/") + "/", str(named.resolve()) + "/"})


@contextmanager
def open_query_lake(root: Path | str, catalog: str | None = None, limits: QueryLimits | None = None) -> Iterator[Lake]:
    """The lake, read-only and locked down for ad hoc queries (a SQLite catalog as a private copy)."""
    limits = limits or QueryLimits()
    spec = Catalog.parse(catalog, Path(root))
    with tempfile.TemporaryDirectory(prefix="viewmill-sql-") as scratch:
        lake = Lake(root, read_only=True, catalog=_private_catalog(spec, Path(scratch), catalog))
        try:
            lock_down(lake, limits.memory)
            yield lake
        finally:
            lake.close()


def _private_catalog(spec: Catalog, scratch: Path, given: str | None) -> str | None:
    """A SQLite catalog copied (SQLite's backup: one consistent snapshot, readers and writers
    undisturbed) to `scratch`; other catalogs, and a missing one, as given (Lake says what is wrong)."""
    source = Path(spec.target)
    if spec.kind != "sqlite" or not source.is_file():
        return given
    copy = scratch / "catalog.sqlite"
    try:
        read_only = f"{source.resolve().as_uri()}?mode=ro"
        with closing(sqlite3.connect(read_only, uri=True)) as src, closing(sqlite3.connect(copy)) as dst:
            src.backup(dst)
            dst.execute("PRAGMA journal_mode=DELETE")  # one file, no -wal beside it
    except sqlite3.Error as exc:
        if not os.access(source.parent, os.W_OK):
            raise LakeError(
                f"the lake directory {source.parent} is read-only (the SQLite catalog needs to write even to be "
                "read): make it writable, or copy the state directory somewhere writable and point --state-dir there"
            ) from None
        raise LakeError(
            f"cannot read the lake catalog {source}: {exc}; check it with `viewmill lake verify`, or restore it "
            "from a backup (docs/operations.md, 'Backing up, moving and checking a lake')"
        ) from None
    return f"sqlite:{copy}"


@contextmanager
def query_stream(
    root: Path | str,
    query: str,
    catalog: str | None = None,
    limits: QueryLimits | None = None,
    output: Path | None = None,
) -> Iterator[QueryStream]:
    """Run one read-only ad hoc query over the lake and stream its result in Arrow batches.
    QueryRefused for anything but a read (OutputRefused for an `output` path on the lake),
    QueryLimitHit past the time or memory limit, counted until the block ends: what the caller
    does with the batches (rendering, writing) is inside the limits too."""
    limits = limits or QueryLimits()
    deadline = time.monotonic() + limits.timeout_s
    with open_query_lake(root, catalog, limits) as lake:
        if output is not None:
            # The real catalog, not the private copy the query reads.
            OutputGuard(Path(root), Catalog.parse(catalog, Path(root)), lake.data_path).check(output)
        with stream_query(lake, query, limits, deadline) as stream:
            yield stream


@contextmanager
def stream_query(lake: Lake, query: str, limits: QueryLimits, deadline: float | None = None) -> Iterator[QueryStream]:
    """`query` on a lake from `open_query_lake`, its result streamed, until `deadline` (a
    time.monotonic() value; default: the time limit from now)."""
    deadline = time.monotonic() + limits.timeout_s if deadline is None else deadline
    done = threading.Event()
    threading.Thread(target=_interrupt_after, args=(lake.con, deadline, done), daemon=True).start()
    stream = QueryStream(lake, limits, deadline)
    try:
        with _translated(lake, limits):
            stream.check_time()
            # One transaction: the checks and the query see the same catalog snapshot (a view a
            # writer redefines in between cannot slip past the check).
            lake.con.execute("BEGIN TRANSACTION")
            stream.start(lake.con.execute(checked_query(lake.con, query)).to_arrow_reader(limits.batch_rows))
        yield stream
    finally:
        done.set()
        with suppress(duckdb.Error):
            lake.con.execute("ROLLBACK")  # it only read; the connection is ready for the next query


def _interrupt_after(con: duckdb.DuckDBPyConnection, deadline: float, done: threading.Event) -> None:
    """DuckDB's interrupt once the deadline passes, again every 0.1 s until `done` (one that lands
    between two statements is dropped); the stream checks the deadline between batches too, where
    Python does the work."""
    delay = max(deadline - time.monotonic(), 0.0)
    while not done.wait(delay):
        con.interrupt()
        delay = 0.1


class QueryStream:
    """A query's result as Arrow record batches, each checked against the limits: the deadline
    before it is read, its size against the memory limit once it is."""

    def __init__(self, lake: Lake, limits: QueryLimits, deadline: float) -> None:
        self._lake, self._limits, self._deadline = lake, limits, deadline

    def start(self, reader: pa.RecordBatchReader) -> None:
        self._reader, self.schema = reader, reader.schema

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        while True:
            self.check_time()
            with _translated(self._lake, self._limits):
                try:
                    batch = self._reader.read_next_batch()
                except StopIteration:
                    return
            if batch.nbytes > self._limits.memory_bytes // 2:
                detail = f"a batch of {batch.num_rows} rows of its result took {batch.nbytes >> 20} MiB in Python"
                raise self._limits.memory_hit(detail)
            yield batch

    def check_time(self) -> None:
        """QueryLimitHit once the command has run past its time limit."""
        if time.monotonic() > self._deadline:
            raise self._limits.time_hit()


@contextmanager
def _translated(lake: Lake, limits: QueryLimits) -> Iterator[None]:
    """DuckDB's errors (raised by DuckDB, or by the Arrow stream that carries them) as one
    message without any credential: a refusal, a limit hit (naming its flag) or a failed query."""
    try:
        yield
    except QueryRefused as exc:
        raise QueryRefused(_scrubbed(str(exc), lake)) from None
    except duckdb.InterruptException:
        raise limits.time_hit() from None
    except (duckdb.OutOfMemoryException, MemoryError):
        raise limits.memory_hit() from None
    except duckdb.PermissionException as exc:
        message = _scrubbed(str(exc), lake)
        raise QueryRefused(f"viewmill sql reads only the lake's tables and its data folder: {message}") from None
    except (duckdb.Error, pa.ArrowException, OSError) as exc:  # OSError: how the Arrow stream raises
        message = str(exc)
        if message.startswith("INTERRUPT Error"):  # the Arrow stream carries DuckDB's errors as text
            raise limits.time_hit() from None
        if message.startswith("Out of Memory Error"):
            raise limits.memory_hit() from None
        raise QueryRefused(f"query failed: {_scrubbed(message, lake)}") from None


def _scrubbed(message: str, lake: Lake) -> str:
    """`message` without any credential viewmill handed to DuckDB."""
    secrets = [os.environ.get(name, "") for name in _CREDENTIAL_ENV]
    if lake.catalog.password is not None:
        secrets.append(lake.catalog.password.get_secret_value())
    for secret in secrets:
        if len(secret) >= 8:  # a shorter value (moto's "test") would mangle ordinary words and paths
            message = message.replace(secret, "***")
    return redact(message)
