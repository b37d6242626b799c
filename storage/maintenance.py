"""Making a lake and keeping it tidy: `viewmill lake init`, `viewmill lake compact`, and the
tidying every run does after it augments (`tidy_after_run`)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from viewmill.storage.catalog import DATA_PATH_ENV, Catalog, data_files
from viewmill.storage.lake import CATALOG_NAME, Lake, LakeError


def init_lake(root: Path | str, *, catalog: str | None = None, data_path: str | None = None) -> Path | None:
    """Make a new, empty lake at `root`. A data folder left without its catalog is moved aside
    to `<data>.orphaned-<UTC time>` first (nothing is deleted); returns where it went, if anywhere.
    An existing lake is refused: init never replaces one."""
    root = Path(root)
    spec = Catalog.parse(catalog, root)
    if spec.kind != "postgres" and spec.exists():
        raise LakeError(f"there is already a lake at {root} (catalog {spec.target}): nothing to initialise")
    data = data_path or os.environ.get(DATA_PATH_ENV) or str(root / "data")
    moved = None
    if data_files(data):
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
        moved = Path(data).with_name(f"{Path(data).name}.orphaned-{stamp}")
        Path(data).rename(moved)
    with Lake(root, catalog=catalog, data_path=data_path):
        pass
    return moved


@dataclass
class CompactReport:
    files_before: int
    files_after: int
    expired_snapshots: list[int] = field(default_factory=list)
    deleted_files: int = 0
    pinned: list[int] = field(default_factory=list)


def pinned_versions(lake: Lake) -> set[int]:
    """Lake versions that named pairs snapshots (and so the models trained on them) record:
    retention never expires these, so their time travel keeps working."""
    rows = lake.con.execute(
        "SELECT lake_version FROM snapshots UNION SELECT s.lake_version FROM models m JOIN snapshots s USING (snapshot)"
    ).fetchall()
    return {int(row[0]) for row in rows if row[0] is not None}


def delete_unreferenced_files(lake: Lake) -> int:
    """Delete the data files DuckLake scheduled for deletion (superseded by a merge, or only in
    expired snapshots): no snapshot reads them. Returns how many."""
    # In a transaction of its own: a SELECT in autocommit deletes the files but DuckLake does not
    # commit their removal from the catalog's schedule, which then lists files that are gone.
    with lake.transaction():
        row = lake.con.execute(
            f"SELECT count(*) FROM ducklake_cleanup_old_files('{CATALOG_NAME}', cleanup_all => true)"
        ).fetchone()
    return int(row[0]) if row else 0


def tidy_after_run(lake: Lake) -> int:
    """What a run does once its augment shards have written: merge the small files chunked commits
    left, then delete the files the merge superseded, so the data folder's raw Parquet holds each
    current row of an appended table once (what pyarrow and Polars read). No snapshot is expired:
    a merged file keeps each row's snapshot (`_ducklake_internal_snapshot_id`), so time travel
    reads it instead. A query another process started before the merge may fail on a deleted
    file; rerun it. Returns the number of files deleted."""
    with lake.writing():  # one span: no writer commits between the merge and the cleanup
        lake.compact()  # refuses to merge a file whose content changed since viewmill wrote it
        return delete_unreferenced_files(lake)


def compact_lake(lake: Lake, keep_days: float = 7.0) -> CompactReport:
    """Merge small files, expire DuckLake snapshots older than `keep_days` (never the current one
    nor a pinned one), and delete the data files no kept snapshot references, so that the
    Parquet files under the data folder hold each current row exactly once."""
    before = len(data_files(lake.data_path))
    with lake.writing():  # one span: no writer commits between the merge and the cleanup
        lake.compact()  # refuses to merge a file whose content changed since viewmill wrote it
        pinned = pinned_versions(lake)
        cutoff = datetime.now(UTC) - timedelta(days=keep_days)
        current = lake.version()
        candidates = lake.con.execute(
            f"SELECT snapshot_id FROM ducklake_snapshots('{CATALOG_NAME}') WHERE snapshot_time < ? "
            "ORDER BY snapshot_id",
            [cutoff],
        ).fetchall()
        expire = [int(row[0]) for row in candidates if int(row[0]) not in pinned and int(row[0]) != current]
        if expire:
            lake.con.execute(f"CALL ducklake_expire_snapshots('{CATALOG_NAME}', versions => ?)", [expire])
        deleted = delete_unreferenced_files(lake)
    return CompactReport(
        files_before=before,
        files_after=len(data_files(lake.data_path)),
        expired_snapshots=expire,
        deleted_files=deleted,
        pinned=sorted(pinned),
    )
