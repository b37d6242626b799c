"""Other tools' ways into a lake: the SQL that opens it in a DuckDB of the user's own
(`viewmill lake attach`: the extensions to load, the ATTACH with catalog, data path and
READ_ONLY, a USE), and one table's current rows as a single file (`viewmill lake export-table`)
for tools that cannot read a DuckLake.

What is printed never holds a secret: a PostgreSQL password and S3 keys appear only as
placeholders in comments. `secret_statements` gives the real ones to a shell viewmill starts
itself, which reads them from a private file, never from the command line.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import duckdb
from viewmill.storage.catalog import Catalog, extension_path, s3_secret_sql, sql_literal
from viewmill.storage.lake import CATALOG_NAME, Lake, LakeError
from viewmill.storage.lake_files import META
from viewmill.storage.output_paths import OutputGuard
from viewmill.storage.schema import TABLES
from viewmill.storage.snapshots import EXPORT_FORMATS

# DuckLake catalog format -> the DuckDB versions whose ducklake extension reads it as it is:
# (first, first that no longer does). DuckDB 1.4.x reads 0.3, 1.5.0-1.5.1 read 0.4, 1.5.2 on
# read 1.0; DuckDB 2.0's DuckLake 1.1 reads and writes 1.0 catalogs without migrating them.
# An older extension never reads a newer format; a newer one needs AUTOMATIC_MIGRATION.
READERS: dict[str, tuple[tuple[int, ...], tuple[int, ...] | None]] = {
    "0.3": ((1, 4, 0), (1, 5, 0)),
    "0.4": ((1, 5, 0), (1, 5, 2)),
    "1.0": ((1, 5, 2), None),
    "1.1": ((2, 0, 0), None),
}
INSTALL_NAMES = {"ducklake": "ducklake", "sqlite_scanner": "sqlite", "postgres_scanner": "postgres", "httpfs": "httpfs"}
POSTGRES_SECRET = "__default_postgres"  # the secret a postgres ATTACH without its own SECRET uses


@dataclass(frozen=True)
class LakeLocation:
    """Where an open lake's catalog and data are, as another DuckDB must be told."""

    root: str
    catalog: Catalog
    data_path: str  # with a trailing slash
    override: bool  # the catalog records another data path (a moved or copied lake)
    format: str  # the DuckLake catalog format version


def locate(lake: Lake) -> LakeLocation:
    """The catalog, data path and catalog format of an open lake."""
    meta = f"SELECT value FROM {META}.ducklake_metadata WHERE key = ? AND scope IS NULL"
    recorded = str(lake.scalar(meta, ["data_path"]) or "")
    data = lake.data_path.rstrip("/") + "/"
    return LakeLocation(
        root=str(lake.root),
        catalog=lake.catalog,
        data_path=data,
        override=recorded.rstrip("/") + "/" != data,
        format=str(lake.scalar(meta, ["version"]) or "unknown"),
    )


def parse_version(text: str) -> tuple[int, int, int]:
    """(major, minor, patch) from '1.5.5', 'v1.5.5 (Variegata) d8cdaa33fd' and the like."""
    found = re.search(r"(\d+)\.(\d+)\.(\d+)", text)
    if found is None:
        raise LakeError(f"'{text}' is not a DuckDB version: give it as MAJOR.MINOR.PATCH, e.g. 1.5.5")
    return int(found[1]), int(found[2]), int(found[3])


def _dotted(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


def supported_versions(fmt: str) -> str:
    """Which DuckDB versions read a catalog of this format, in words."""
    if fmt not in READERS:
        return f"the DuckDB versions whose ducklake extension reads catalog format {fmt}"
    first, stop = READERS[fmt]
    if stop is not None:
        return f"DuckDB {_dotted(first)} up to (not including) {_dotted(stop)}"
    later = " (DuckDB 2.0 reads and writes it without migrating it)" if fmt == "1.0" else ""
    return f"DuckDB {_dotted(first)} or newer{later}"


def check_client(version: str, fmt: str) -> None:
    """Refuse a DuckDB whose ducklake extension cannot read this catalog format as it is."""
    if fmt not in READERS:
        return
    first, stop = READERS[fmt]
    have = parse_version(version)
    if have < first or (stop is not None and have >= stop):
        own = duckdb.__version__
        raise LakeError(
            f"DuckDB {_dotted(have)} cannot read this lake (DuckLake catalog format {fmt}): use "
            f"{supported_versions(fmt)}, e.g. DuckDB {own} (`pip install duckdb-cli=={own}` gives its "
            "command-line shell), or query through viewmill (`viewmill sql`)"
        )


def _extensions(where: LakeLocation) -> list[str]:
    names = ["ducklake", where.catalog.extension]
    if where.data_path.startswith("s3://"):
        names.append("httpfs")
    return [name for name in names if name]


def _load_lines(where: LakeLocation, offline: bool) -> list[str]:
    if offline:  # the wheels viewmill loads: the same build, nothing downloaded
        return [f"LOAD {sql_literal(str(extension_path(name)))};" for name in _extensions(where)]
    lines = []
    for name in _extensions(where):
        lines += [f"INSTALL {INSTALL_NAMES[name]};", f"LOAD {INSTALL_NAMES[name]};"]
    return lines


def attach_statement(where: LakeLocation, *, read_write: bool = False) -> str:
    """The ATTACH for this lake: read-only unless asked, with its own data path."""
    options = ["DATA_INLINING_ROW_LIMIT 0"] if read_write else ["READ_ONLY"]  # rows stay plain Parquet
    if where.catalog.kind == "sqlite":  # a reader must not fail on the writer's short catalog locks
        options.append("META_BUSY_TIMEOUT 60000")
    options.append(f"DATA_PATH {sql_literal(where.data_path)}")
    if where.override:  # the catalog records where the lake was made, not where it is now
        options.append("OVERRIDE_DATA_PATH true")
    return f"ATTACH {sql_literal(where.catalog.uri)} AS {CATALOG_NAME} ({', '.join(options)});"


def _secret_notes(where: LakeLocation) -> list[str]:
    notes = []
    if where.catalog.kind == "postgres":
        notes += [
            "-- The catalog's password is not printed: start DuckDB with PGPASSWORD set (or a ~/.pgpass entry),",
            f"-- or run this first: CREATE TEMPORARY SECRET {POSTGRES_SECRET} (TYPE postgres, PASSWORD '<password>');",
        ]
    if where.data_path.startswith("s3://"):
        env = os.environ
        extra = [
            f"{key} {sql_literal(value)}"
            for key, value in (
                ("REGION", env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")),
                ("ENDPOINT", env.get("VIEWMILL_S3_ENDPOINT")),
                ("URL_STYLE", env.get("VIEWMILL_S3_URL_STYLE")),
            )
            if value
        ]
        notes += [
            "-- S3 credentials are not printed: fill them in and run this first (before any query):",
            "-- CREATE SECRET viewmill_s3 (TYPE s3, KEY_ID '<AWS_ACCESS_KEY_ID>', SECRET '<AWS_SECRET_ACCESS_KEY>'"
            + "".join(f", {item}" for item in extra)
            + ");",
        ]
    return notes


def attach_sql(
    where: LakeLocation, *, duckdb_version: str, read_write: bool = False, secrets: Sequence[str] = ()
) -> str:
    """Every statement a DuckDB of `duckdb_version` runs to open the lake (read-only unless
    `read_write`), with comments saying what it needs; secrets only as placeholders, unless
    `secrets` (`secret_statements`, for a private file) gives the real ones."""
    check_client(duckdb_version, where.format)
    shown = _dotted(parse_version(duckdb_version))
    offline = shown == _dotted(parse_version(duckdb.__version__))
    how = (
        "the extensions load from viewmill's environment (no download; the versions must match exactly)"
        if offline
        else "INSTALL fetches the extensions from DuckDB's repository once (that machine must reach it)"
    )
    lines = [
        f"-- viewmill lake {where.root}: DuckLake catalog format {where.format}, {where.catalog.kind} catalog "
        f"{where.catalog.target}, data {where.data_path}",
        f"-- For DuckDB {shown}: {how}.",
        f"-- This catalog is read by {supported_versions(where.format)}; never attach it with AUTOMATIC_MIGRATION.",
        "-- Read-write: viewmill's writer lock is bypassed (see viewmill lake attach --help)."
        if read_write
        else "-- READ_ONLY: this session cannot write the lake, and never waits for a viewmill run.",
        *_load_lines(where, offline),  # before any secret: a secret's type needs its extension loaded
        *(secrets or _secret_notes(where)),
        attach_statement(where, read_write=read_write),
        f"USE {CATALOG_NAME};",
    ]
    return "\n".join(lines) + "\n"


def secret_statements(where: LakeLocation) -> list[str]:
    """The real secrets (PostgreSQL password, S3 keys) for a shell viewmill starts: never printed."""
    statements = []
    if where.catalog.password is not None:
        password = sql_literal(where.catalog.password.get_secret_value())
        statements.append(f"CREATE OR REPLACE TEMPORARY SECRET {POSTGRES_SECRET} (TYPE postgres, PASSWORD {password});")
    if where.data_path.startswith("s3://"):
        statements.append(s3_secret_sql() + ";")
    return statements


READ_WRITE_WARNING = (
    "warning: a read-write attach writes the lake outside viewmill. It bypasses viewmill's writer lock, so a "
    "commit of yours can interleave with a running viewmill stage; and the Parquet files it writes have no "
    "recorded content hash, so pairing, training and compaction refuse them (naming the file) until you have "
    "checked the lake and run `viewmill lake verify --record-hashes`. Stop viewmill runs on this lake first, and "
    "never attach it with AUTOMATIC_MIGRATION: a migrated catalog cannot be opened by viewmill's "
    f"DuckDB {duckdb.__version__} again."
)


def export_table(lake: Lake, table: str, path: Path, fmt: str | None = None) -> int:
    """Write a table's current rows (every file merged, deletes applied) to one Parquet or JSONL
    file: what a tool that cannot read a DuckLake takes where the data folder's own files would
    be wrong (a table with deletes, such as `evals`). The file appears whole (written aside,
    then renamed); a path inside the lake is refused. Returns the number of rows."""
    if table not in TABLES:
        raise LakeError(f"the lake has no table '{table}': choose one of {', '.join(sorted(TABLES))}")
    guard = OutputGuard.of(lake)
    guard.check(path)
    fmt = fmt or {".parquet": "parquet", ".jsonl": "jsonl", ".json": "jsonl"}.get(path.suffix)
    if fmt not in EXPORT_FORMATS:
        raise LakeError(f"cannot tell the export format of {path}: name it .parquet or .jsonl, or pass --format")
    path.parent.mkdir(parents=True, exist_ok=True)
    with guard.atomic(path) as partial:  # one statement: the rows and their count come from one snapshot
        row = lake.con.execute(f"COPY (SELECT * FROM {table}) TO {sql_literal(str(partial))} {EXPORT_FORMATS[fmt]}")
        written = row.fetchone()
    return int(written[0]) if written else 0
