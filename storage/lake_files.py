"""The data and delete files a DuckLake catalog lists, where they are (a local path or an
s3:// URL) and how to read their bytes, sizes and footers in either place."""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa
from viewmill.storage.catalog import sql_literal

META = "__ducklake_metadata_lake"  # the catalog database DuckLake attaches beside the lake
OWN_FOLDER = "_viewmill"  # viewmill's records beside the data (no Parquet file)
BLOCK = 1 << 20  # bytes read at a time when a local file is hashed


@dataclass(frozen=True)
class CatalogFile:
    table: str
    kind: str  # data | delete
    location: str  # absolute local path or s3:// URL
    rel: str  # relative to the lake's data path (what the hash record names)
    rows: int
    size: int
    current: bool  # in the lake's current state (else only in older snapshots)
    data_file_id: int  # a delete file's is that of the data file it deletes from
    begin_snapshot: int
    file_id: int  # the file's own id: DuckLake numbers data and delete files from one counter

    @property
    def path(self) -> Path:
        return Path(self.location)


def is_remote(location: str) -> bool:
    return location.startswith("s3://")


def join(base: str, part: str) -> str:
    return base.rstrip("/") + "/" + part.lstrip("/")


def relative_to_data(data_path: str, location: str) -> str:
    """`location` relative to the data path; a location outside it stays as it is."""
    prefix = data_path.rstrip("/") + "/"
    return location[len(prefix) :] if location.startswith(prefix) else location


def catalog_files(
    con: duckdb.DuckDBPyConnection,
    data_path: str,
    *,
    from_id: int | None = None,
    tables: tuple[str, ...] = (),
    in_sqlite: bool = False,
) -> list[CatalogFile]:
    """Every data and delete file the catalog lists (any snapshot), with its recorded size and
    rows; `from_id`: only files numbered from it on (see `next_file_id`), found by a SQLite
    catalog itself (`in_sqlite`) through its indexes; `tables`: only theirs."""
    filters = ["file_id >= ?"] if from_id is not None else []
    params: list = [from_id] if from_id is not None else []
    if tables:
        filters.append("list_contains(?, table_name)")
        params.append(list(tables))
    where = f"WHERE {' AND '.join(filters)}" if filters else ""
    rows = con.execute(f"SELECT * FROM ({_listing(from_id, in_sqlite)}) {where} ORDER BY 1, 2, 3", params).fetchall()
    out = []
    for table, kind, path, rel, tpath, trel, spath, srel, n, size, current, data_id, begin, file_id in rows:
        location = path
        if rel:
            schema_dir = join(data_path, spath) if srel else spath
            location = join(join(schema_dir, tpath) if trel else tpath, path)
        out.append(
            CatalogFile(
                table, kind, location, relative_to_data(data_path, location), int(n or 0), int(size or 0),
                bool(current), int(data_id), int(begin), int(file_id),
            )
        )  # fmt: skip
    return out


# The catalog's files with their table and schema, in SQL both DuckDB and SQLite run
# (`{prefix}`: the catalog database, or none where SQLite runs it).
_LISTING = """
WITH t AS (SELECT * FROM (SELECT *, row_number() OVER (PARTITION BY table_id ORDER BY begin_snapshot DESC) AS latest
                          FROM {prefix}ducklake_table) WHERE latest = 1),
     s AS (SELECT * FROM (SELECT *, row_number() OVER (PARTITION BY schema_id ORDER BY begin_snapshot DESC) AS latest
                          FROM {prefix}ducklake_schema) WHERE latest = 1),
     f AS (SELECT table_id, 'data' AS kind, path, path_is_relative, record_count AS n, file_size_bytes, begin_snapshot,
                  end_snapshot, data_file_id, data_file_id AS file_id FROM {prefix}ducklake_data_file {data_where}
           UNION ALL
           SELECT table_id, 'delete', path, path_is_relative, delete_count, file_size_bytes, begin_snapshot,
                  end_snapshot, data_file_id, delete_file_id FROM {prefix}ducklake_delete_file {delete_where})
SELECT t.table_name, f.kind, f.path, f.path_is_relative AS rel, t.path AS table_path, t.path_is_relative AS table_rel,
       s.path AS schema_path, s.path_is_relative AS schema_rel, f.n, f.file_size_bytes,
       f.end_snapshot IS NULL AND t.end_snapshot IS NULL AS current, f.data_file_id, f.begin_snapshot, f.file_id
FROM f JOIN t USING (table_id) JOIN s ON s.schema_id = t.schema_id"""
# SQLite's answer comes back as text: its columns typed again.
_TYPED = """SELECT table_name, kind, path, rel::BIGINT::BOOLEAN AS rel, table_path,
       table_rel::BIGINT::BOOLEAN AS table_rel, schema_path, schema_rel::BIGINT::BOOLEAN AS schema_rel, n::BIGINT AS n,
       file_size_bytes::BIGINT AS file_size_bytes, current::BIGINT::BOOLEAN AS current,
       data_file_id::BIGINT AS data_file_id, begin_snapshot::BIGINT AS begin_snapshot, file_id::BIGINT AS file_id
FROM ({})"""
_NEXT_FILE_ID = "SELECT next_file_id FROM {prefix}ducklake_snapshot ORDER BY snapshot_id DESC LIMIT 1"


def _listing(from_id: int | None, in_sqlite: bool) -> str:
    """The listing query; from `from_id` on, a SQLite catalog runs it whole (one query, its
    file tables read through their primary-key indexes)."""
    if from_id is None or not in_sqlite:
        return _LISTING.format(prefix=f"{META}.", data_where="", delete_where="")
    where = {
        "data_where": f"WHERE data_file_id >= {int(from_id)}",
        "delete_where": f"WHERE delete_file_id >= {int(from_id)}",
    }
    return _TYPED.format(_sqlite(_LISTING.format(prefix="", **where)))


def _sqlite(query: str) -> str:
    """`query` run by the SQLite catalog itself, whose primary-key indexes answer its WHERE and
    ORDER BY: DuckDB's SQLite scanner reads every row of a table and filters after, so a
    commit's look at its new files would grow with the lake's file count (issue 32)."""
    return f"SELECT * FROM sqlite_query({sql_literal(META)}, {sql_literal(query)})"


def next_file_id(con: duckdb.DuckDBPyConnection, *, in_sqlite: bool = False) -> int:
    """The id the next file written will get. Files are numbered in the order commits add them;
    a merged file keeps its sources' first snapshot, so ids, not snapshots, tell what is new.
    `in_sqlite`: the catalog is SQLite (its index finds the last snapshot)."""
    query = _sqlite(_NEXT_FILE_ID.format(prefix="")) if in_sqlite else _NEXT_FILE_ID.format(prefix=f"{META}.")
    row = con.execute(query).fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def file_size(con: duckdb.DuckDBPyConnection, location: str) -> int | None:
    """The file's size in bytes, or None when it is not there."""
    if not is_remote(location):
        path = Path(location)
        return path.stat().st_size if path.is_file() else None
    # read_blob reads no content when only the size is asked for; a missing object is no row.
    row = con.execute("SELECT size FROM read_blob(?)", [location]).fetchone()
    return int(row[0]) if row else None


def footer_rows(con: duckdb.DuckDBPyConnection, location: str) -> int:
    """The row count a Parquet footer records (raises when the footer cannot be read)."""
    if not is_remote(location):
        import pyarrow.parquet as pq  # only a merge's row counts need it, not a plain read

        return pq.read_metadata(location).num_rows
    row = con.execute("SELECT num_rows FROM parquet_file_metadata(?)", [location]).fetchone()
    return int(row[0]) if row else 0


FOOTER_ERRORS = (OSError, pa.ArrowException, duckdb.Error)


def content_sha256(con: duckdb.DuckDBPyConnection, location: str) -> str | None:
    """The sha256 of the whole file, read in 1 MiB blocks (locally) or by DuckDB (s3://, where
    the object is fetched once); None when the file is not there."""
    if is_remote(location):
        row = con.execute("SELECT sha256(content) FROM read_blob(?)", [location]).fetchone()
        return str(row[0]) if row else None
    digest = hashlib.sha256()
    try:
        with open(location, "rb") as handle:
            while block := handle.read(BLOCK):
                digest.update(block)
    except FileNotFoundError:
        return None
    return digest.hexdigest()


def stray_files(con: duckdb.DuckDBPyConnection, data_path: str) -> list[str]:
    """Parquet files under a local data folder (as relative paths); none for s3://, where
    listing and moving objects aside is left to the store's own tools."""
    if is_remote(data_path) or not Path(data_path).is_dir():
        return []
    return sorted(relative_to_data(data_path, str(p)) for p in Path(data_path).rglob("*.parquet"))


# Longer than any file system's time granularity viewmill runs on (FAT's 2 s aside): a folder
# changed within this of a time may show an earlier time.
CLOCK_SLACK_NS = 1_000_000_000


@dataclass
class _Listing:
    mtime_ns: int  # the folder's own time when listed
    listed_ns: int
    subfolders: list[str]
    parquet: set[str] = field(default_factory=set)


class FolderWatch:
    """Finds the Parquet files made under a local data folder since a time, listing only the
    folders changed since their last listing (a file made or removed changes its folder's
    time) and looking only at names not seen there before: a commit's cost follows the
    folders it wrote to, not the lake's size. DuckLake never rewrites a file in place."""

    def __init__(self, data_path: str) -> None:
        self.data_path = data_path
        self._listings: dict[str, _Listing] = {}

    def written_since(self, since_ns: int) -> list[str]:
        """Parquet files (relative paths) with a time from `since_ns` on; none for s3://."""
        if is_remote(self.data_path) or not Path(self.data_path).is_dir():
            return []
        root = self.data_path.rstrip("/")
        written, pending = [], [root]
        while pending:
            folder = pending.pop()
            try:
                mtime = os.stat(folder).st_mtime_ns
            except FileNotFoundError:
                continue
            known = self._listings.get(folder)
            if known is not None and known.mtime_ns == mtime and mtime < known.listed_ns - CLOCK_SLACK_NS:
                pending.extend(known.subfolders)  # unchanged since it was listed
                continue
            listing = _list_folder(folder, mtime, skip=os.path.join(root, OWN_FOLDER))
            seen = known.parquet if known is not None else set()
            # A file made since `since_ns` changed its folder's time: an older folder's files (a
            # process's first listing of the lake) need no look at their own times.
            fresh = listing.parquet - seen if mtime >= since_ns - CLOCK_SLACK_NS else set()
            for name in sorted(fresh):
                path = os.path.join(folder, name)
                with contextlib.suppress(FileNotFoundError):
                    if os.stat(path).st_mtime_ns >= since_ns:
                        written.append(relative_to_data(self.data_path, path))
            self._listings[folder] = listing
            pending.extend(listing.subfolders)
        return sorted(written)


def _list_folder(folder: str, mtime_ns: int, skip: str) -> _Listing:
    listing = _Listing(mtime_ns, time.time_ns(), [])
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                if entry.path == skip:
                    continue
                listing.subfolders.append(entry.path)
            elif entry.name.endswith(".parquet"):
                listing.parquet.add(entry.name)
    return listing


def remove_rolled_back_files(con: duckdb.DuckDBPyConnection, data_path: str, since_ns: int) -> list[str]:
    """Delete the Parquet files a rolled-back transaction wrote (DuckLake leaves them): files under
    a local data folder that no catalog entry lists, made since the transaction began. Only the
    writer holding the lake's lock writes, so these are its own; older strays stay for `lake
    repair`. Returns the relative paths removed."""
    listed = {entry.rel for entry in catalog_files(con, data_path)} | scheduled_for_deletion(con, data_path)
    removed = []
    for rel in stray_files(con, data_path):
        path = Path(data_path) / rel
        if rel not in listed and path.stat().st_mtime_ns >= since_ns:
            path.unlink(missing_ok=True)
            removed.append(rel)
    return removed


def scheduled_for_deletion(con: duckdb.DuckDBPyConnection, data_path: str) -> set[str]:
    rows = con.execute(f"SELECT path, path_is_relative FROM {META}.ducklake_files_scheduled_for_deletion").fetchall()
    return {path if rel else relative_to_data(data_path, path) for path, rel in rows}


# DuckLake's default target_file_size (viewmill never changes it): only smaller files are merged.
MERGE_TARGET = 512 * 1024 * 1024


def merge_candidates(files: list[CatalogFile]) -> list[CatalogFile]:
    """The current files `ducklake_merge_adjacent_files` may read: data files under the target
    size in tables that have two or more of them, and their delete files."""
    small: dict[str, list[CatalogFile]] = {}
    for entry in files:
        if entry.current and entry.kind == "data" and entry.size < MERGE_TARGET:
            small.setdefault(entry.table, []).append(entry)
    chosen = {(e.table, e.data_file_id) for group in small.values() if len(group) > 1 for e in group}
    return [e for e in files if e.current and (e.table, e.data_file_id) in chosen]
