"""Checking a lake's catalog against its files (`viewmill lake verify`): every listed file is
there with its recorded size, rows and (unless quick) the content hash recorded when viewmill
wrote it; no stray files; every named pairs snapshot matches its hash. Mending is `repair.py`."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import duckdb
from viewmill.storage.file_hashes import HashRecords, content_problem, record_files
from viewmill.storage.lake import Lake, LakeError
from viewmill.storage.lake_files import (
    FOOTER_ERRORS,
    CatalogFile,
    catalog_files,
    file_size,
    footer_rows,
    scheduled_for_deletion,
    stray_files,
)
from viewmill.storage.pair_hashes import HASHED_COLUMNS, legacy_content_hash, pairs_content_hash
from viewmill.storage.schema import TABLES
from viewmill.storage.snapshots import stored_negatives

from viewmill.cpu import cpu_cores

DAMAGE = ("missing", "unreadable", "size", "rows", "content")  # a file whose rows cannot be trusted


@dataclass(frozen=True)
class Problem:
    kind: str  # missing | unreadable | size | rows | content | unhashed | orphan | snapshot
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
    quick: bool = False  # sizes and footers only: contents were not hashed
    problems: list[Problem] = field(default_factory=list)
    legacy_snapshots: list[str] = field(default_factory=list)  # ids-only hash (made by older viewmill)
    foreign_records: int = 0  # hash entries not signed by this lake's key (ignored)

    @property
    def errors(self) -> list[Problem]:
        """Problems that make current reads fail or wrong; history-only ones are warnings."""
        return [p for p in self.problems if p.current]

    @property
    def ok(self) -> bool:
        return not self.errors

    def of_kind(self, *kinds: str) -> list[Problem]:
        return [p for p in self.errors if p.kind in kinds]


def check_file(
    con: duckdb.DuckDBPyConnection, entry: CatalogFile, records: HashRecords, *, quick: bool = False
) -> Problem | None:
    """Whether a listed file is there with the size and row count the catalog records and, in
    full mode, the content hash recorded when viewmill wrote it (quick: only that one exists)."""
    size = file_size(con, entry.location)
    problem = None
    if size is None:
        problem = ("missing", f"{entry.kind} file of {entry.rows} rows is gone")
    elif entry.size and size != entry.size:
        problem = ("size", f"{size} bytes, catalog says {entry.size}")
    else:
        try:
            rows = footer_rows(con, entry.location)
        except FOOTER_ERRORS as exc:
            rows, problem = None, ("unreadable", f"not readable Parquet ({exc})")
        if rows is not None and rows != entry.rows:
            problem = ("rows", f"{rows} rows, catalog says {entry.rows}")
    if problem is None and quick and not records.has(entry.rel):
        problem = ("unhashed", "no recorded content hash (written by an older viewmill, or outside viewmill)")
    if problem is None and not quick:
        found = content_problem(con, entry, records)
        problem = (found.kind, found.detail) if found is not None else None
    if problem is None:
        return None
    return Problem(problem[0], entry.table, entry.location, problem[1], entry.current)


def refuse_missing_files(lake: Lake) -> None:
    """Refuse (LakeError) a lake whose catalog lists current files that are not there: a stat each
    (a size request for s3://), so a run stops before it starts rather than on its first read.
    The usual cause is a catalog older than its data: a backup put back after a later run merged
    small files into new ones and deleted them; those new files hold every row, as orphans."""
    listed = [entry for entry in catalog_files(lake.con, lake.data_path) if entry.current]
    missing = [entry for entry in listed if file_size(lake.con, entry.location) is None]
    if not missing:
        return
    first = missing[0]
    more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
    raise LakeError(
        f"the lake's catalog {lake.catalog.target} lists files that are not there: the {first.table} {first.kind} "
        f"file {first.location}{more}. The catalog is older than its data (a backup put back after a later run "
        "merged those files into newer ones and deleted them; the newer files still hold their rows). Mend it "
        "before running: `viewmill lake verify` lists the missing and the newer files, `viewmill lake repair` "
        "takes the newer files' rows back, then run this again (same --state-dir and --catalog)"
    )


# What the content hash and the legacy hash read of a pair: no other column is read back.
SNAPSHOT_HASH_READS = ", ".join((*HASHED_COLUMNS, "view_b_id"))


def check_snapshots(lake: Lake, report: VerifyReport) -> None:
    """Every named pairs snapshot still holds n_pairs pairs whose content hash (with its hard
    negatives, where it has them) is the recorded one."""
    for name, recipe, n_pairs, recorded in lake.con.execute(
        "SELECT snapshot, recipe, n_pairs, content_hash FROM snapshots ORDER BY snapshot"
    ).fetchall():
        try:
            # Ordered by DuckDB (on every core), so the hash need not sort them again.
            sql = f"SELECT {SNAPSHOT_HASH_READS} FROM pairs WHERE snapshot = ? ORDER BY pair_id"
            pairs = lake.arrow(sql, [name])
            negatives = stored_negatives(lake, name)  # None: a snapshot without hard negatives
        except Exception as exc:  # any read failure is this snapshot's problem
            report.problems.append(Problem("snapshot", "pairs", name, f"pairs cannot be read ({exc})"))
            continue
        if pairs.num_rows != n_pairs:
            report.problems.append(Problem("snapshot", "pairs", name, f"{pairs.num_rows} pairs, recorded {n_pairs}"))
        elif pairs_content_hash(recipe, pairs, negatives) != recorded:
            if legacy_content_hash(recipe, pairs) == recorded:
                report.legacy_snapshots.append(name)
            else:
                report.problems.append(Problem("snapshot", "pairs", name, "content hash differs from the recorded one"))


def verify_lake(lake: Lake, *, quick: bool = False) -> VerifyReport:
    """Missing, unreadable, resized, re-counted or (full mode) changed files, files with no
    recorded hash, orphaned Parquet files under a local data folder, and named snapshots whose
    pairs no longer match their hash."""
    report = VerifyReport(quick=quick)
    listed = catalog_files(lake.con, lake.data_path)
    records = lake.hash_records()
    report.files, report.foreign_records = len(listed), records.foreign
    workers = 1 if quick else max(1, min(cpu_cores(), len(listed)))
    with ThreadPoolExecutor(workers) as pool:
        # The files are hashed on worker threads (hashlib lets go of the GIL) while this
        # thread checks the snapshots' hashes: the two took about equal parts of a full verify.
        groups = [listed[i::workers] for i in range(workers)]
        checked = [pool.submit(_check_group, lake.con, group, records, quick) for group in groups]
        snapshots = VerifyReport(quick=quick)
        check_snapshots(lake, snapshots)
        problems = [found for future in checked for found in future.result()]
    order = {entry.location: i for i, entry in enumerate(listed)}
    report.problems += sorted(problems, key=lambda problem: order[problem.path])
    report.problems += _orphans(lake, {entry.rel for entry in listed})
    if report.of_kind("unhashed", "orphan"):
        _second_look(lake, report)
    report.problems += snapshots.problems
    report.legacy_snapshots += snapshots.legacy_snapshots
    return report


def _check_group(
    con: duckdb.DuckDBPyConnection, group: list[CatalogFile], records: HashRecords, quick: bool
) -> list[Problem]:
    """`group`'s problems, on a cursor of its own (a DuckDB connection serves one thread at a time)."""
    with con.cursor() as cursor:
        return [p for p in (check_file(cursor, entry, records, quick=quick) for entry in group) if p]


def _orphans(lake: Lake, known: set[str]) -> list[Problem]:
    known = known | scheduled_for_deletion(lake.con, lake.data_path)
    return [
        Problem("orphan", table_of(rel) or "?", _location(lake, rel), "no catalog entry lists this file")
        for rel in stray_files(lake.con, lake.data_path)
        if rel not in known
    ]


def _second_look(lake: Lake, report: VerifyReport) -> None:
    """Verify takes no lock: a writer may have committed a file and not yet recorded its hash,
    or written a file it commits a moment later. Look again at those two kinds only."""
    listed = {entry.rel for entry in catalog_files(lake.con, lake.data_path)}
    records = lake.hash_records()
    prefix = lake.data_path.rstrip("/") + "/"

    def settled(problem: Problem) -> bool:
        rel = problem.path.removeprefix(prefix)
        return (problem.kind == "orphan" and rel in listed) or (problem.kind == "unhashed" and records.has(rel))

    report.problems = [p for p in report.problems if not settled(p)]


def _location(lake: Lake, rel: str) -> str:
    return lake.data_path.rstrip("/") + "/" + rel


def table_of(rel: str) -> str | None:
    """The table a file under `<data>/main/<table>/` belongs to."""
    parts = rel.split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "main" and parts[1] in TABLES else None


def record_missing_hashes(lake: Lake) -> tuple[list[CatalogFile], VerifyReport]:
    """`viewmill lake verify --record-hashes`: under the writer lock, verify in full, then record
    today's content of the files that have no recorded hash (and no other problem) as trusted.
    A file whose content differs from its record is never re-recorded: that is damage (repair)."""
    with lake.writing():
        report = verify_lake(lake)
        unhashed = {p.path for p in report.problems if p.kind == "unhashed"}
        files = [entry for entry in catalog_files(lake.con, lake.data_path) if entry.location in unhashed]
        recorded = record_files(lake.con, lake.data_path, files, lake.signing_key())
        trusted = {entry.location for entry in recorded}
        report.problems = [p for p in report.problems if not (p.kind == "unhashed" and p.path in trusted)]
        return recorded, report


def damaged_files(report: VerifyReport) -> dict[str, set[str]]:
    """Table -> locations of its current files whose rows cannot be trusted."""
    damaged: dict[str, set[str]] = {}
    for problem in report.of_kind(*DAMAGE):
        damaged.setdefault(problem.table, set()).add(problem.path)
    return damaged
