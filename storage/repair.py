"""Mending a lake (`viewmill lake repair`) without losing rows whose files are intact, and
taking back only files that viewmill itself wrote into this lake."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from viewmill.storage.catalog import sql_literal
from viewmill.storage.crash_points import crash_point
from viewmill.storage.file_hashes import HashRecords, digest_of
from viewmill.storage.integrity import VerifyReport, check_snapshots, damaged_files, table_of, verify_lake
from viewmill.storage.lake import Lake, LakeError
from viewmill.storage.lake_files import CatalogFile, catalog_files, relative_to_data
from viewmill.storage.lake_setup import set_layout, set_row_groups
from viewmill.storage.schema import TABLES

# Natural keys: rows of these tables found in orphaned files are taken back in, once.
KEYS: dict[str, tuple[str, ...]] = {
    "sentences": ("corpus", "sentence_id"),
    "nli_pairs": ("corpus", "pair_id"),
    "translations": ("cache_key", "rank"),
    "views": ("view_id",),
    "corpus_members": ("corpus_version", "sentence_id"),
    "corpus_versions": ("corpus_version",),
    "embeddings": ("encoder", "text_hash"),
}


@dataclass
class RepairReport:
    rebuilt: dict[str, int] = field(default_factory=dict)  # table -> rows kept
    lost_files: list[str] = field(default_factory=list)
    recovered: dict[str, int] = field(default_factory=dict)  # table -> rows taken back from orphaned files
    moved_to: str | None = None
    not_taken_back: list[tuple[str, str]] = field(default_factory=list)  # orphaned file, why it was not
    dropped_snapshots: list[str] = field(default_factory=list)
    after: VerifyReport | None = None


def _intact_rows(table: str, data: list[CatalogFile], deletes: dict[int, CatalogFile]) -> str:
    """SQL for the rows of `data` files minus the rows their delete files remove."""
    selects = []
    for entry in data:
        columns = ", ".join(TABLES[table].names)
        query = f"SELECT {columns} FROM read_parquet({sql_literal(entry.location)}, file_row_number = true)"
        if entry.data_file_id in deletes:
            gone = sql_literal(deletes[entry.data_file_id].location)
            query += f" WHERE file_row_number NOT IN (SELECT pos FROM read_parquet({gone}))"
        selects.append(query)
    return " UNION ALL ".join(selects)


def rebuild_table(lake: Lake, table: str, damaged: set[str]) -> int:
    """Replace `table` by the rows of its intact current files, in one transaction; returns rows kept.
    A data file whose delete file is damaged goes too: its deleted rows must not come back."""
    current = [e for e in catalog_files(lake.con, lake.data_path, tables=(table,)) if e.current]
    deletes = {e.data_file_id: e for e in current if e.kind == "delete"}
    bad_ids = {e.data_file_id for e in current if e.location in damaged}
    keep = [e for e in current if e.kind == "data" and e.data_file_id not in bad_ids]
    schema = TABLES[table]
    with lake.transaction():
        rows = lake.arrow(_intact_rows(table, keep, deletes)) if keep else schema.empty_table()
        lake.con.execute(f"DROP TABLE {table}")
        lake.con.register("_empty", schema.empty_table())
        lake.con.execute(f"CREATE TABLE {table} AS SELECT * FROM _empty LIMIT 0")
        lake.con.unregister("_empty")
        set_layout(lake.con, table)
        lake.append(table, rows.cast(schema))
    set_row_groups(lake.con, table)  # refused for a table the transaction created: set once committed
    return rows.num_rows


def repair_lake(lake: Lake, state_root: Path, on_wait: Callable[[], None] | None = None) -> RepairReport:
    """Bring the lake back to a consistent state, keeping every intact row, all under the writer
    lock (from the first check to the last), so two repairs, or a repair and a run, take turns:
    1. a table with missing, damaged or changed current files is rebuilt from its intact files;
    2. orphaned files (e.g. written after the catalog backup that was restored) are taken back
       into keyed tables (views, sentences, translations, corpus versions), once, only when this
       lake's signed hash record says viewmill wrote them with these exact bytes; every orphan
       is then moved to `<state>/orphaned-<time>/`, never deleted, and those not taken back
       are reported with the reason;
    3. a named snapshot whose pairs no longer match its hash is dropped, so the next run of
       its recipe makes it again (same content, same name) from the views still there.
    """
    report = RepairReport()
    with lake.writing(on_wait):
        before = verify_lake(lake)
        damaged = damaged_files(before)
        _refuse_to_launder(before, damaged)
        for table, paths in sorted(damaged.items()):
            report.lost_files += sorted(paths)
            report.rebuilt[table] = rebuild_table(lake, table, paths)
            crash_point("repair-rebuilt")
        orphans = [p.path for p in before.of_kind("orphan")]
        if orphans:
            report.moved_to = str(_set_orphans_aside(lake, orphans, state_root, report))
        _drop_damaged_snapshots(lake, report)
        report.after = verify_lake(lake)
    return report


def _refuse_to_launder(before: VerifyReport, damaged: dict[str, set[str]]) -> None:
    """A rebuilt table's new files get fresh, trusted hashes: a file whose content nobody
    recorded must not pass through a rebuild into them. Refused before anything changes."""
    unhashed = [p for p in before.of_kind("unhashed") if p.table in damaged]
    if unhashed:
        raise LakeError(
            f"cannot repair {unhashed[0].table}: it must be rebuilt from its intact files, but {len(unhashed)} of "
            f"them (e.g. {unhashed[0].path}) have no recorded content hash (written by an older viewmill, or "
            "outside viewmill): check the lake with `viewmill lake verify`, trust their content with "
            "`viewmill lake verify --record-hashes`, then run `viewmill lake repair` again (nothing was changed)"
        )


def _set_orphans_aside(lake: Lake, locations: list[str], state_root: Path, report: RepairReport) -> Path:
    target = state_root / f"orphaned-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S')}"
    records = lake.hash_records()
    for location in locations:
        rel = relative_to_data(lake.data_path, location)
        if not Path(location).is_file():
            continue  # gone since the check: nothing to take back or move
        table = table_of(rel)
        why = _why_untrusted(lake, rel, location, records)
        if why is None and table not in KEYS:
            why = f"viewmill takes back only {', '.join(KEYS)}; a rerun remakes {table or 'the rest'}"
        if why is None and table is not None:
            _take_back(lake, table, location, report)
            crash_point("repair-took-back")
        else:
            report.not_taken_back.append((location, why))
        moved = target / rel
        moved.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(location, moved)
    return target


def _why_untrusted(lake: Lake, rel: str, location: str, records: HashRecords) -> str | None:
    """None when this lake's signed record says viewmill wrote exactly these bytes here."""
    digest = digest_of(lake.con, location)
    if digest is not None and records.matches(rel, digest):
        return None
    if records.has(rel):
        return "its content differs from what viewmill wrote there"
    return "no record that viewmill wrote it into this lake (not in the lake's signed hash record)"


def _take_back(lake: Lake, table: str, location: str, report: RepairReport) -> None:
    try:
        rows = lake.arrow(f"SELECT * FROM read_parquet({sql_literal(location)}, union_by_name = true)")
    except Exception as exc:  # recorded yet unreadable: reported, only moved aside
        report.not_taken_back.append((location, f"recorded but not readable Parquet ({exc})"))
        return
    missing = set(TABLES[table].names) - set(rows.column_names)
    if missing:
        report.not_taken_back.append((location, f"lacks the columns {', '.join(sorted(missing))}"))
        return
    with lake.transaction():
        added = lake.append(table, rows, unique_on=KEYS[table])
    report.recovered[table] = report.recovered.get(table, 0) + added


def _drop_damaged_snapshots(lake: Lake, report: RepairReport) -> None:
    check = VerifyReport()
    check_snapshots(lake, check)
    for problem in check.of_kind("snapshot"):
        with lake.transaction():
            lake.con.execute("DELETE FROM pairs WHERE snapshot = ?", [problem.path])
            lake.con.execute("DELETE FROM snapshots WHERE snapshot = ?", [problem.path])
        report.dropped_snapshots.append(problem.path)
