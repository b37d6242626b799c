"""The lake: Parquet data files under a DuckLake catalog, opened through DuckDB.

Every write is a transaction, so a failed stage leaves no half-written state, and
every commit is a DuckLake snapshot that can be time-travelled to.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import os
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from pathlib import Path
from typing import Any

import duckdb
import filelock
import polars as pl
import pyarrow as pa
from pydantic import SecretStr
from viewmill.storage.schema import PARTITIONS, TABLES

from viewmill.extras import require

CATALOG_NAME = "lake"
CATALOG_ENV = "VIEWMILL_CATALOG"
DATA_PATH_ENV = "VIEWMILL_DATA_PATH"


class LakeError(RuntimeError):
    """The lake cannot be opened or written; the message says why and what to do."""


def s3_secret_sql() -> str:
    """A DuckDB secret for s3:// data paths, from the usual AWS variables plus viewmill's own
    for S3-compatible stores (MinIO, Ceph): VIEWMILL_S3_ENDPOINT, VIEWMILL_S3_URL_STYLE
    (path or vhost), VIEWMILL_S3_USE_SSL (true or false)."""
    env = os.environ
    settings = {
        "KEY_ID": env.get("AWS_ACCESS_KEY_ID"),
        "SECRET": env.get("AWS_SECRET_ACCESS_KEY"),
        "SESSION_TOKEN": env.get("AWS_SESSION_TOKEN"),
        "REGION": env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION"),
        "ENDPOINT": env.get("VIEWMILL_S3_ENDPOINT"),
        "URL_STYLE": env.get("VIEWMILL_S3_URL_STYLE"),
    }
    parts = ["TYPE s3"] + [f"{key} {_sql_literal(value)}" for key, value in settings.items() if value]
    if env.get("VIEWMILL_S3_USE_SSL"):
        parts.append(f"USE_SSL {env['VIEWMILL_S3_USE_SSL'].lower() in ('1', 'true', 'yes')}")
    return f"CREATE OR REPLACE SECRET viewmill_s3 ({', '.join(parts)})"


def extension_path(name: str) -> Path:
    """A DuckDB extension shipped by its `duckdb-extension-<name>` wheel (no download at run time)."""
    package = f"duckdb-extension-{name}=={duckdb.__version__}"
    try:
        module = importlib.import_module(f"duckdb_extension_{name}")
    except ImportError as exc:
        raise LakeError(f"the DuckDB extension '{name}' is not installed: pip install {package}") from exc
    path = Path(module.__file__).parent / "extensions" / f"v{duckdb.__version__}" / f"{name}.duckdb_extension"
    if not path.exists():
        raise LakeError(
            f"no '{name}' extension for duckdb {duckdb.__version__} at {path}: "
            f"pip install {package} (versions must match exactly)"
        )
    return path


def _sql_literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _recorded_data_path(message: str) -> str | None:
    """The data path a catalog records, from DuckLake's "does not match" refusal."""
    found = re.search(r'does not match existing data path in the catalog "([^"]*)"', message)
    return found.group(1) if found else None


def data_files(data_path: str) -> list[Path]:
    """The Parquet files under a local data folder (none for s3:// or a missing folder)."""
    if data_path.startswith("s3://") or not Path(data_path).is_dir():
        return []
    return sorted(Path(data_path).rglob("*.parquet"))


def check_not_orphaned(root: Path | str, *, catalog: str | None = None, data_path: str | None = None) -> None:
    """Refuse (LakeError) when `root` has lake data but no catalog; checked before a run starts."""
    spec = Catalog.parse(catalog, Path(root))
    if not spec.exists():
        refuse_orphaned_data(spec, data_path or os.environ.get(DATA_PATH_ENV) or str(Path(root) / "data"))


def refuse_orphaned_data(catalog: Catalog, data_path: str) -> None:
    """A data folder without its catalog is a lake whose history would be orphaned by a new
    catalog made beside it: refuse, naming both paths and the ways out."""
    found = data_files(data_path)
    if catalog.kind == "postgres" or not found:
        return
    raise LakeError(
        f"the lake's catalog {catalog.target} is missing but its data folder {data_path} holds {len(found)} "
        f"Parquet file(s): restore the catalog from a backup to {catalog.target} (see README, 'Backing up, moving "
        "and checking a lake'), or start a new, empty lake with `viewmill lake init`, which moves the old data "
        "aside to a dated folder"
    )


@dataclass(frozen=True)
class Catalog:
    """Where the lake's metadata lives: `sqlite` (default: local, several processes),
    `duckdb` (one process at a time) or `postgres:<libpq conninfo>` (several machines)."""

    kind: str
    target: str  # a file path, or a PostgreSQL connection string without its password
    # Kept apart so that no message, repr or connection string the catalog makes holds it.
    password: SecretStr | None = dataclass_field(default=None, compare=False)

    @classmethod
    def parse(cls, spec: str | None, root: Path) -> Catalog:
        spec = spec or os.environ.get(CATALOG_ENV)
        if not spec:
            legacy = root / "catalog.ducklake"  # lakes made before SQLite became the default
            return cls("duckdb", str(legacy)) if legacy.exists() else cls("sqlite", str(root / "catalog.sqlite"))
        kind, _, target = spec.partition(":")
        if kind == "postgres" and target.strip():
            target, password = _split_password(target.strip())
            return cls("postgres", target, password)
        if kind in ("sqlite", "duckdb"):
            default = root / ("catalog.sqlite" if kind == "sqlite" else "catalog.ducklake")
            return cls(kind, target or str(default))
        raise LakeError(
            f"catalog '{redact(spec)}' is not understood: use sqlite[:PATH], duckdb[:PATH] or "
            f"postgres:dbname=... host=... (set with --catalog or {CATALOG_ENV})"
        )

    @property
    def uri(self) -> str:
        return "ducklake:" + (self.target if self.kind == "duckdb" else f"{self.kind}:{self.target}")

    @property
    def extension(self) -> str | None:
        return {"sqlite": "sqlite_scanner", "postgres": "postgres_scanner"}.get(self.kind)

    def exists(self) -> bool:
        return self.kind == "postgres" or Path(self.target).exists()


_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)|(://[^:/@\s]*:)[^@\s]*@", re.IGNORECASE)


def redact(text: str) -> str:
    """`text` with any libpq password (password=..., or user:password@ in a URI) masked."""
    return _PASSWORD.sub(lambda m: f"{m[1]}***" if m[1] else f"{m[3]}***@", text)


def _split_password(conninfo: str) -> tuple[str, SecretStr | None]:
    """A libpq connection string without its password, and the password (libpq's own parser)."""
    from psycopg import conninfo as pq

    try:
        params = pq.conninfo_to_dict(conninfo)
    except Exception:  # libpq quotes the string, password included: say nothing of it
        raise LakeError(
            f"the PostgreSQL catalog connection string '{redact(conninfo)}' cannot be parsed: write it as "
            "libpq key=value pairs, e.g. postgres:'dbname=viewmill host=db user=viewmill'"
        ) from None
    password = params.pop("password", None)
    return pq.make_conninfo(**params), SecretStr(str(password)) if password else None


class WriterLock:
    """Serialises the lake's writers from before a transaction starts until it commits.

    DuckLake retries concurrent appends instead of failing them, so two writers that
    check "which keys are new?" at the same time would both insert the same keys. Under
    this lock a writer's snapshot includes every earlier commit. Local catalogs use a
    file lock beside the catalog (filelock: flock on Unix, msvcrt on Windows); PostgreSQL
    an advisory lock held by its own session.
    """

    KEY = "hashtext('viewmill-lake-writer')"

    def __init__(self, catalog: Catalog, root: Path) -> None:
        self.catalog, self.root = catalog, root
        self._file = None
        self._pg = None  # one session per Lake, opened at the first write, not one per commit

    def acquire(self) -> None:
        if self.catalog.kind == "postgres":
            if self._pg is None or self._pg.closed:
                psycopg = require("psycopg", "a PostgreSQL catalog's writer lock")
                password = self.catalog.password.get_secret_value() if self.catalog.password else None
                extra = {"password": password} if password else {}
                self._pg = psycopg.connect(self.catalog.target, autocommit=True, **extra)
            self._pg.execute(f"SELECT pg_advisory_lock({self.KEY})")
        else:
            if self._file is None:
                self.root.mkdir(parents=True, exist_ok=True)
                # One lock per Lake shared by its threads (as the Lake's own depth counter is);
                # the file stays so no process ever locks a path another just unlinked.
                self._file = filelock.FileLock(self.root / "writer.lock", thread_local=False, preserve_lock_file=True)
            self._file.acquire()

    def release(self) -> None:
        if self._pg is not None and not self._pg.closed:
            self._pg.execute(f"SELECT pg_advisory_unlock({self.KEY})")
        if self._file is not None and self._file.is_locked:
            self._file.release()

    def close(self) -> None:
        if self._pg is not None:
            self._pg.close()  # ends the session, which would drop a lock still held
            self._pg = None
        if self._file is not None:
            self._file.release(force=True)
            self._file = None


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
        # Rows carry their own keys and every read that needs an order says ORDER BY, so
        # DuckDB need not buffer large inserts to keep their order (less memory).
        self.con = duckdb.connect(config={"threads": max(1, os.cpu_count() or 1), "preserve_insertion_order": False})
        try:
            self._attach()
            if not read_only:
                with self._writing():
                    self._create_tables()
        except BaseException as exc:
            self.close()
            self._raise_if_disk_full(exc)
            raise

    def _attach(self) -> None:
        for name in ("ducklake", self.catalog.extension):
            if name:
                self.con.execute(f"LOAD {_sql_literal(str(extension_path(name)))}")
        if self.data_path.startswith("s3://"):
            self.con.execute(f"LOAD {_sql_literal(str(extension_path('httpfs')))}")
            self.con.execute(s3_secret_sql())
        if self.catalog.password is not None:  # libpq gets it from a (temporary, redacted) DuckDB secret
            secret = _sql_literal(self.catalog.password.get_secret_value())
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
        attach = f"ATTACH {_sql_literal(self.catalog.uri)} AS {CATALOG_NAME}"
        data = self.data_path.rstrip("/") + "/"
        try:
            self.con.execute(f"{attach} ({', '.join([*options, f'DATA_PATH {_sql_literal(data)}'])})")
            return
        except duckdb.Error as exc:  # DuckLake raises a plain Error for a data path mismatch
            recorded = _recorded_data_path(str(exc))
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
            override = [*options, f"DATA_PATH {_sql_literal(data)}", "OVERRIDE_DATA_PATH true"]
            self.con.execute(f"{attach} ({', '.join(override)})")
        else:  # made with its data elsewhere (another folder, s3://): use the recorded path
            self.con.execute(f"{attach} ({', '.join(options)})")
            self.data_path = recorded

    def _create_tables(self) -> None:
        existing = {row[0] for row in self.con.execute("SHOW TABLES").fetchall()}
        for name, schema in TABLES.items():
            if name in existing:
                self._add_missing_columns(name, schema)
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

    # -- lifecycle -----------------------------------------------------------------
    def close(self) -> None:
        self.con.close()
        self._lock.close()

    def __enter__(self) -> Lake:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _writing(self) -> Iterator[None]:
        if self.read_only:
            raise LakeError("this lake was opened read-only; open it without read_only to write")
        self._lock_depth += 1
        if self._lock_depth == 1:
            self._lock.acquire()
        try:
            yield
        finally:
            self._lock_depth -= 1
            if self._lock_depth == 0:
                self._lock.release()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """All writes inside commit together or not at all, and no other writer commits in between.
        A transaction opened inside another joins it (commits or rolls back with it)."""
        if self._in_transaction:
            yield
            return
        with self._writing():
            self.con.execute("BEGIN TRANSACTION")
            self._in_transaction = True
            try:
                yield
            except BaseException as exc:
                self._in_transaction = False
                with contextlib.suppress(duckdb.Error):  # a failed COMMIT may have ended it already
                    self.con.execute("ROLLBACK")
                self._raise_if_disk_full(exc)
                raise
            self._in_transaction = False
            try:
                self.con.execute("COMMIT")
            except duckdb.Error as exc:
                self._raise_if_disk_full(exc)
                raise

    def _raise_if_disk_full(self, exc: BaseException) -> None:
        full = (isinstance(exc, OSError) and exc.errno == errno.ENOSPC) or any(
            sign in str(exc).lower() for sign in ("no space left on device", "database or disk is full")
        )
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

    # -- writes --------------------------------------------------------------------
    def append(self, table: str, rows: pa.Table | pa.RecordBatchReader, unique_on: Sequence[str] = ()) -> int:
        """Append rows, conformed to the table's schema; with `unique_on`, only new keys.

        A RecordBatchReader is streamed: DuckDB pulls batches as it writes Parquet, so
        memory stays flat however many rows come. Returns the number of rows inserted.
        """
        schema = TABLES[table]
        if isinstance(rows, pa.Table):
            if rows.num_rows == 0:
                return 0
            incoming: pa.Table | pa.RecordBatchReader = rows.select(schema.names).cast(schema)
        else:
            incoming = pa.RecordBatchReader.from_batches(
                schema, (batch.select(schema.names).cast(schema) for batch in rows)
            )
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
            finally:
                self.con.unregister("_incoming")
        return int(count[0]) if count else 0

    def compact(self) -> None:
        """Merge the small Parquet files that chunked commits leave into larger ones."""
        with self._writing():
            self.con.execute(f"CALL ducklake_merge_adjacent_files({_sql_literal(CATALOG_NAME)})")

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
