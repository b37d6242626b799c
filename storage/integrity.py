"""Checking a lake's catalog against its files (`viewmill lake verify`) and mending it
(`viewmill lake repair`) without losing rows whose files are intact."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from viewmill.storage.catalog import data_files, sql_literal
from viewmill.storage.lake import Lake
from viewmill.storage.schema import PARTITIONS, TABLES
from viewmill.storage.snapshots import legacy_content_hash, pairs_content_hash

META = "__ducklake_metadata_lake"
# Natural keys: rows of these tables found in orphaned files are taken back in, once.
KEYS: dict[str, tuple[str, ...]] = {
    "sentences": ("corpus", "sentence_id"),
    "nli_pairs": ("corpus", "pair_id"),
    "translations": ("cache_key", "rank"),
    "views": ("view_id",),
    "corpus_members": ("corpus_version", "sentence_id"),
    "corpus_versions": ("corpus_version",),
}


@dataclass(frozen=True)
class CatalogFile:
    table: str
    kind: str  # data | delete
    path: Path
    rows: int
    size: int
    current: bool  # in the lake's current state (else only in older snapshots)
    data_file_id: int


@dataclass(frozen=True)
class Problem:
    kind: str  # missing | unreadable | size | rows | orphan | snapshot
    table: str
    path: str
    detail: str
    current: bool = True

    def line(self) -> str:
        where = "" if self.current else " (older snapshots only)"
        return f"{self.kind:<10} {self.table:<16} {self.path}: {self.detail}{where}"


@dataclass
class VerifyReport:
    files: int = 0
    problems: list[Problem] = field(default_factory=list)
    legacy_snapshots: list[str] = field(default_factory=list)  # ids-only hash (made by older viewmill)

    @property
    def errors(self) -> list[Problem]:
        """Problems that make current reads fail or wrong; history-only ones are warnings."""
        return [p for p in self.problems if p.current]

    @property
    def ok(self) -> bool:
        return not self.errors


def catalog_files(lake: Lake) -> list[CatalogFile]:
    """Every data and delete file the catalog lists (any snapshot), with its recorded size and rows."""
    rows = lake.con.execute(
        f"""
        WITH t AS (SELECT * FROM {META}.ducklake_table
                   QUALIFY row_number() OVER (PARTITION BY table_id ORDER BY begin_snapshot DESC) = 1),
             s AS (SELECT * FROM {META}.ducklake_schema
                   QUALIFY row_number() OVER (PARTITION BY schema_id ORDER BY begin_snapshot DESC) = 1),
             f AS (SELECT table_id, 'data' AS kind, path, path_is_relative, record_count AS n, file_size_bytes,
                          end_snapshot, data_file_id FROM {META}.ducklake_data_file
                   UNION ALL
                   SELECT table_id, 'delete', path, path_is_relative, delete_count, file_size_bytes,
                          end_snapshot, data_file_id FROM {META}.ducklake_delete_file)
        SELECT t.table_name, f.kind, f.path, f.path_is_relative, t.path, t.path_is_relative, s.path,
               s.path_is_relative, f.n, f.file_size_bytes, f.end_snapshot IS NULL AND t.end_snapshot IS NULL,
               f.data_file_id
        FROM f JOIN t USING (table_id) JOIN s ON s.schema_id = t.schema_id
        ORDER BY 1, 2, 3
        """
    ).fetchall()
    out = []
    for table, kind, path, rel, tpath, trel, spath, srel, n, size, current, file_id in rows:
        full = Path(path)
        if rel:
            table_dir = Path(tpath) if not trel else (Path(spath) if not srel else Path(lake.data_path) / spath) / tpath
            full = table_dir / path
        out.append(CatalogFile(table, kind, full, int(n or 0), int(size or 0), bool(current), int(file_id)))
    return out


def _scheduled(lake: Lake) -> set[Path]:
    rows = lake.con.execute(f"SELECT path, path_is_relative FROM {META}.ducklake_files_scheduled_for_deletion")
    return {(Path(lake.data_path) / p if rel else Path(p)).resolve() for p, rel in rows.fetchall()}


def check_file(entry: CatalogFile) -> Problem | None:
    """Whether a listed file is there with the size and row count the catalog records."""
    where = str(entry.path)
    if not entry.path.exists():
        return Problem("missing", entry.table, where, f"{entry.kind} file of {entry.rows} rows is gone", entry.current)
    size = entry.path.stat().st_size
    if entry.size and size != entry.size:
        return Problem("size", entry.table, where, f"{size} bytes, catalog says {entry.size}", entry.current)
    try:
        rows = pq.read_metadata(entry.path).num_rows
    except (OSError, pa.ArrowException) as exc:
        return Problem("unreadable", entry.table, where, f"not readable Parquet ({exc})", entry.current)
    if rows != entry.rows:
        return Problem("rows", entry.table, where, f"{rows} rows, catalog says {entry.rows}", entry.current)
    return None


def check_snapshots(lake: Lake, report: VerifyReport) -> None:
    """Every named pairs snapshot still holds n_pairs pairs whose content hash is the recorded one."""
    for name, recipe, n_pairs, recorded in lake.con.execute(
        "SELECT snapshot, recipe, n_pairs, content_hash FROM snapshots ORDER BY snapshot"
    ).fetchall():
        try:
            pairs = lake.arrow("SELECT * FROM pairs WHERE snapshot = ?", [name])
        except Exception as exc:  # any read failure is this snapshot's problem
            report.problems.append(Problem("snapshot", "pairs", name, f"pairs cannot be read ({exc})"))
            continue
        if pairs.num_rows != n_pairs:
            report.problems.append(Problem("snapshot", "pairs", name, f"{pairs.num_rows} pairs, recorded {n_pairs}"))
        elif pairs_content_hash(recipe, pairs) != recorded:
            if legacy_content_hash(recipe, pairs) == recorded:
                report.legacy_snapshots.append(name)
            else:
                report.problems.append(Problem("snapshot", "pairs", name, "content hash differs from the recorded one"))


def verify_lake(lake: Lake) -> VerifyReport:
    """Missing, unreadable, resized or re-counted files, orphaned Parquet files under the data
    folder, and named snapshots whose pairs no longer match their hash."""
    report = VerifyReport()
    listed = catalog_files(lake)
    report.files = len(listed)
    if not lake.data_path.startswith("s3://"):
        report.problems += [p for p in map(check_file, listed) if p is not None]
        known = {entry.path.resolve() for entry in listed} | _scheduled(lake)
        for path in data_files(lake.data_path):
            if path.resolve() not in known:
                table = _table_of(lake, path)
                report.problems.append(Problem("orphan", table or "?", str(path), "no catalog entry lists this file"))
    check_snapshots(lake, report)
    return report


def _table_of(lake: Lake, path: Path) -> str | None:
    """The table a file under `<data>/main/<table>/` belongs to."""
    parts = path.relative_to(Path(lake.data_path)).parts
    return parts[1] if len(parts) > 2 and parts[0] == "main" and parts[1] in TABLES else None


@dataclass
class RepairReport:
    rebuilt: dict[str, int] = field(default_factory=dict)  # table -> rows kept
    lost_files: list[str] = field(default_factory=list)
    recovered: dict[str, int] = field(default_factory=dict)  # table -> rows taken back from orphaned files
    moved_to: str | None = None
    dropped_snapshots: list[str] = field(default_factory=list)
    after: VerifyReport | None = None


def _intact_rows(lake: Lake, table: str, data: list[CatalogFile], deletes: dict[int, CatalogFile]) -> str:
    """SQL for the rows of `data` files minus the rows their delete files remove."""
    selects = []
    for entry in data:
        columns = ", ".join(TABLES[table].names)
        query = f"SELECT {columns} FROM read_parquet({sql_literal(str(entry.path))}, file_row_number = true)"
        if entry.data_file_id in deletes:
            gone = sql_literal(str(deletes[entry.data_file_id].path))
            query += f" WHERE file_row_number NOT IN (SELECT pos FROM read_parquet({gone}))"
        selects.append(query)
    return " UNION ALL ".join(selects)


def rebuild_table(lake: Lake, table: str, damaged: set[Path]) -> int:
    """Replace `table` by the rows of its intact current files, in one transaction; returns rows kept.
    A data file whose delete file is damaged goes too: its deleted rows must not come back."""
    current = [e for e in catalog_files(lake) if e.table == table and e.current]
    deletes = {e.data_file_id: e for e in current if e.kind == "delete"}
    bad_ids = {e.data_file_id for e in current if e.path.resolve() in damaged}
    keep = [e for e in current if e.kind == "data" and e.data_file_id not in bad_ids]
    schema = TABLES[table]
    with lake.transaction():
        rows = lake.arrow(_intact_rows(lake, table, keep, deletes)) if keep else schema.empty_table()
        lake.con.execute(f"DROP TABLE {table}")
        lake.con.register("_empty", schema.empty_table())
        lake.con.execute(f"CREATE TABLE {table} AS SELECT * FROM _empty LIMIT 0")
        lake.con.unregister("_empty")
        if table in PARTITIONS:
            lake.con.execute(f"ALTER TABLE {table} SET PARTITIONED BY ({', '.join(PARTITIONS[table])})")
        lake.append(table, rows.cast(schema))
    return rows.num_rows


def repair_lake(lake: Lake, state_root: Path) -> RepairReport:
    """Bring the lake back to a consistent state, keeping every intact row:
    1. a table with missing or damaged current files is rebuilt from its intact files;
    2. rows of orphaned files (e.g. written after the catalog backup that was restored) are
       taken back into keyed tables (views, sentences, translations, corpus versions), once;
       every orphaned file is then moved to `<state>/orphaned-<time>/`, never deleted;
    3. a named snapshot whose pairs no longer match its hash is dropped, so the next run of
       its recipe makes it again (same content, same name) from the views still there.
    """
    report = RepairReport()
    before = verify_lake(lake)
    damaged: dict[str, set[Path]] = {}
    for problem in before.errors:
        if problem.kind in ("missing", "unreadable", "size", "rows"):
            damaged.setdefault(problem.table, set()).add(Path(problem.path).resolve())
            report.lost_files.append(problem.path)
    for table, paths in damaged.items():
        report.rebuilt[table] = rebuild_table(lake, table, paths)
    orphans = [Path(p.path) for p in before.problems if p.kind == "orphan"]
    if orphans:
        report.moved_to = str(_take_back_orphans(lake, orphans, state_root, report.recovered))
    for problem in verify_lake(lake).problems:
        if problem.kind == "snapshot":
            with lake.transaction():
                lake.con.execute("DELETE FROM pairs WHERE snapshot = ?", [problem.path])
                lake.con.execute("DELETE FROM snapshots WHERE snapshot = ?", [problem.path])
            report.dropped_snapshots.append(problem.path)
    report.after = verify_lake(lake)
    return report


def _take_back_orphans(lake: Lake, orphans: list[Path], state_root: Path, recovered: dict[str, int]) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    target = state_root / f"orphaned-{stamp}"
    for path in orphans:
        table = _table_of(lake, path)
        if table in KEYS:
            try:
                rows = lake.arrow(f"SELECT * FROM read_parquet({sql_literal(str(path))}, union_by_name = true)")
            except Exception:  # an unreadable orphan is only moved aside
                rows = None
            if rows is not None and set(TABLES[table].names) <= set(rows.column_names):
                with lake.transaction():
                    added = lake.append(table, rows, unique_on=KEYS[table])
                recovered[table] = recovered.get(table, 0) + added
        moved = target / path.relative_to(Path(lake.data_path))
        moved.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(path), moved)
    return target
