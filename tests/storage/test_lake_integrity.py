"""The lake is the truth: copies, lost catalogs, compaction, snapshot hashes, corpus versions,
verify and repair, on real DuckLake lakes (SQLite catalog, Parquet files)."""

import os
import shutil
import time
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from viewmill.storage.corpus_versions import record_corpus_version
from viewmill.storage.integrity import verify_lake
from viewmill.storage.lake import Lake, LakeError
from viewmill.storage.maintenance import compact_lake, init_lake, tidy_after_run
from viewmill.storage.repair import repair_lake
from viewmill.storage.schema import EVALS, VIEWS
from viewmill.storage.snapshots import create_pairs_snapshot, read_pairs

from tests.lake_state import seed_views

TABLES = ("sentences", "views", "pairs", "snapshots", "corpus_members")


def _seed(lake: Lake, n: int = 6, chunks: int = 3) -> str:
    return seed_views(lake, n, chunks)


def _snapshot(lake: Lake, version: str):
    return create_pairs_snapshot(
        lake, recipe="r", corpus="c", corpus_version=version, pairings=[("hA", "hB")], run_id="run"
    )


def _counts(lake: Lake) -> dict[str, int]:
    return {table: lake.scalar(f"SELECT count(*) FROM {table}") for table in TABLES}


def _hashes(lake: Lake) -> list[tuple]:
    return lake.con.execute("SELECT snapshot, content_hash, n_pairs FROM snapshots ORDER BY snapshot").fetchall()


@pytest.fixture
def seeded(tmp_path) -> Path:
    root = tmp_path / "state" / "lake"
    with Lake(root) as lake:
        _snapshot(lake, _seed(lake))
    return root


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in (root / "data").rglob("*.parquet"))


def test_a_copied_or_moved_lake_reads_and_writes_only_its_own_files(seeded, tmp_path):
    with Lake(seeded, read_only=True) as lake:
        counts, hashes = _counts(lake), _hashes(lake)
    original_files = _files(seeded)
    copy = tmp_path / "copy" / "lake"
    shutil.copytree(seeded, copy)
    with Lake(copy) as lake:
        assert _counts(lake) == counts and _hashes(lake) == hashes
        assert lake.data_path == str(copy / "data")
        lake.append("evals", pa.Table.from_pylist([{"model": "m", "task": "t", "value": 1.0}], schema=EVALS))
        listed = lake.arrow("SELECT data_file FROM ducklake_list_files('lake', 'evals')")["data_file"].to_pylist()
        assert len(listed) == 1 and listed[0].startswith(str(copy / "data"))
        assert lake.scalar("SELECT count(*) FROM views WHERE text = 'view A of s0'") == 1
    assert _files(seeded) == original_files, "the original's folder is untouched"
    with Lake(seeded, read_only=True) as lake:
        assert _counts(lake) == counts and lake.scalar("SELECT count(*) FROM evals") == 0
    moved = tmp_path / "moved" / "lake"
    shutil.move(str(seeded), moved)  # the original path is gone: reads must not need it
    with Lake(moved, read_only=True) as lake:
        assert _counts(lake) == counts and _hashes(lake) == hashes
        assert lake.arrow("SELECT text FROM views ORDER BY view_id")["text"][0].as_py() == "view A of s0"


def test_a_lost_catalog_is_refused_naming_both_paths_and_init_moves_the_data_aside(seeded):
    files = _files(seeded)
    for catalog in seeded.glob("catalog.sqlite*"):
        catalog.unlink()
    with pytest.raises(LakeError) as refused:
        Lake(seeded)
    message = str(refused.value)
    assert f"catalog {seeded / 'catalog.sqlite'} is missing" in message
    assert f"data folder {seeded / 'data'} holds {len(files)} Parquet file(s)" in message
    assert "restore the catalog from a backup" in message and "viewmill lake init" in message
    assert not (seeded / "catalog.sqlite").exists() and _files(seeded) == files, "nothing created, nothing lost"

    moved = init_lake(seeded)
    assert moved is not None and moved.name.startswith("data.orphaned-")
    assert sorted(str(p.relative_to(moved)) for p in moved.rglob("*.parquet")) == [f[len("data/") :] for f in files]
    with Lake(seeded, read_only=True) as lake:
        assert _counts(lake) == dict.fromkeys(TABLES, 0)
    with pytest.raises(LakeError, match="already a lake"):
        init_lake(seeded)


def test_compaction_leaves_each_current_row_once_in_the_raw_parquet_and_keeps_pinned_versions(seeded):
    with Lake(seeded) as lake:
        lake.compact()  # what every augment stage does: the merged-away files stay behind
        catalog_views = lake.scalar("SELECT count(*) FROM views")
        raw = f"read_parquet('{seeded}/data/main/views/**/*.parquet', hive_partitioning = false)"
        assert duckdb.sql(f"SELECT count(*) FROM {raw}").fetchone()[0] > catalog_views
        pinned = lake.scalar("SELECT lake_version FROM snapshots")
        counts, hashes = _counts(lake), _hashes(lake)
        report = compact_lake(lake, keep_days=0)
        assert report.pinned == [pinned] and pinned not in report.expired_snapshots
        assert report.deleted_files > 0 and report.files_after < report.files_before
        assert _counts(lake) == counts and _hashes(lake) == hashes
        assert lake.scalar(f"SELECT count(*) FROM views AT (VERSION => {pinned})") == catalog_views
        assert verify_lake(lake).problems == []
    assert duckdb.sql(f"SELECT count(*) FROM {raw}").fetchone()[0] == catalog_views == 12
    files = str(seeded / "data" / "main" / "views" / "**" / "*.parquet")
    assert pl.scan_parquet(files, hive_partitioning=False).select(pl.len()).collect().item() == catalog_views


def test_the_tidying_after_a_run_leaves_raw_parquet_right_and_keeps_time_travel(seeded):
    """What every run's augment finish does (no `lake compact`): merge, then delete what the
    merge superseded. Merged files carry DuckLake's `_ducklake_internal_*` columns and later
    commits' files do not: Polars reads the mix only with the options docs/lake.md gives."""
    views = f"{seeded}/data/main/views/**/*.parquet"
    with Lake(seeded) as lake:
        pinned, counts = lake.scalar("SELECT lake_version FROM snapshots"), _counts(lake)
        assert tidy_after_run(lake) > 0, "the merged-away files are deleted"
        assert _counts(lake) == counts and lake.scalar(f"SELECT count(*) FROM views AT (VERSION => {pinned})") == 12
        assert lake.scalar("SELECT count(*) FROM __ducklake_metadata_lake.ducklake_files_scheduled_for_deletion") == 0
        assert verify_lake(lake).problems == [], "the merged files' hashes were recorded"
        later = {"view_id": "A-late", "sentence_id": "s0", "augmenter": "A", "text": "late", "status": "kept"}
        lake.append("views", pa.Table.from_pylist([later], schema=VIEWS))  # a plain file beside merged ones
    assert duckdb.sql(f"SELECT count(*) FROM read_parquet('{views}', hive_partitioning = false)").fetchone()[0] == 13
    assert ds.dataset(seeded / "data" / "main" / "views", format="parquet").count_rows() == 13
    mixed = (pl.exceptions.SchemaError, pl.exceptions.ColumnNotFoundError)  # which one: the files' order
    with pytest.raises(mixed, match="_ducklake_internal"):
        pl.scan_parquet(views, hive_partitioning=False).collect()  # the trap the options avoid
    documented = pl.scan_parquet(views, hive_partitioning=False, extra_columns="ignore", missing_columns="insert")
    frame = documented.select(pl.exclude("^_ducklake_internal_.*$")).collect()
    assert frame.height == 13 and frame.columns == VIEWS.names
    assert sorted(frame["view_id"].to_list()) == sorted([*(f"{a}-s{i}" for a in "AB" for i in range(6)), "A-late"])


def test_the_content_hash_covers_the_texts_training_reads(seeded):
    with Lake(seeded) as lake:
        version = lake.scalar("SELECT corpus_version FROM corpus_versions")
        first = _snapshot(lake, version)
        assert not first.created
        with lake.transaction():  # viewmill's write path: the new files' hashes are recorded
            lake.con.execute("UPDATE views SET text = 'a different text' WHERE view_id = 'B-s0'")
        second = _snapshot(lake, version)
        assert second.created and second.name != first.name and second.content_hash != first.content_hash
        pairs = read_pairs(lake, second.name).to_pydict()
        texts = dict(zip(pairs["sentence_id"], pairs["text_b"], strict=True))
        assert texts["s0"] == "a different text" and texts["s1"] == "view B of s1"
        assert read_pairs(lake, first.name).num_rows == second.n_pairs == 6


def test_a_shrunk_corpus_is_paired_without_the_sentences_it_lost(seeded):
    with Lake(seeded) as lake:
        full = lake.arrow("SELECT snapshot, corpus_version FROM snapshots").to_pylist()[0]
        smaller = record_corpus_version(lake, "c", ["s0", "s2", "s4"], run_id="reingest")
        assert smaller != full["corpus_version"]
        snap = _snapshot(lake, smaller)
        assert snap.created and snap.n_pairs == 3
        assert sorted(read_pairs(lake, snap.name)["sentence_id"].to_pylist()) == ["s0", "s2", "s4"]
        assert lake.scalar("SELECT corpus_version FROM snapshots WHERE snapshot = ?", [snap.name]) == smaller
        assert lake.scalar("SELECT count(*) FROM sentences") == 6, "sentences are kept; versions say who is in"
        assert read_pairs(lake, full["snapshot"]).num_rows == 6, "the older snapshot is unchanged"
        with pytest.raises(LakeError, match="is not in the lake: ingest it first"):
            _snapshot(lake, "0" * 32)


def test_verify_finds_missing_resized_orphaned_files_and_changed_snapshots(seeded):
    with Lake(seeded, read_only=True) as lake:
        assert verify_lake(lake).problems == []
        listed = lake.arrow("SELECT data_file FROM ducklake_list_files('lake', 'views')")
        views = sorted(listed["data_file"].to_pylist())
    Path(views[0]).unlink()
    shutil.copy(views[1], Path(views[1]).with_name("ducklake-stray.parquet"))
    with open(views[2], "ab") as handle:
        handle.write(b"junk")
    with Lake(seeded) as lake, lake.transaction():  # tampered through the catalog, hashes recorded
        lake.con.execute("UPDATE pairs SET text_a = 'tampered' WHERE sentence_id = 's1'")
    with Lake(seeded, read_only=True) as lake:
        report = verify_lake(lake)
    kinds = sorted((p.kind, Path(p.path).name if p.kind != "snapshot" else "snapshot") for p in report.errors)
    assert kinds == sorted([
        ("missing", Path(views[0]).name), ("orphan", "ducklake-stray.parquet"), ("size", Path(views[2]).name),
        ("snapshot", "snapshot"),
    ])  # fmt: skip
    assert not report.ok


def test_full_verify_hashes_on_a_thread_per_core_and_reports_as_one_thread_would(seeded, monkeypatch):
    import threading

    import viewmill.storage.integrity as integrity

    with Lake(seeded, read_only=True) as lake:
        listed = lake.arrow("SELECT data_file FROM ducklake_list_files('lake', 'views')")
    views = sorted(listed["data_file"].to_pylist())
    for path in views[:3]:  # same size, footer intact, a data page's byte changed: only the hash can tell
        data = bytearray(Path(path).read_bytes())
        data[10] ^= 0xFF
        Path(path).write_bytes(bytes(data))
    hashed_on, hash_file = set(), integrity.content_problem

    def recording(con, entry, records):
        hashed_on.add(threading.get_ident())
        time.sleep(0.05)  # every thread gets a file before any finishes its group
        return hash_file(con, entry, records)

    monkeypatch.setattr(integrity, "content_problem", recording)
    reports = {}
    for cores in (1, 3):
        monkeypatch.setattr(integrity, "cpu_cores", lambda cores=cores: cores)
        hashed_on.clear()
        with Lake(seeded, read_only=True) as lake:
            reports[cores] = [(p.kind, p.path) for p in verify_lake(lake).errors]
        assert len(hashed_on) == cores
    assert reports[3] == reports[1]
    assert sorted(path for kind, path in reports[3] if kind == "content") == views[:3]


def test_repair_keeps_intact_views_and_a_rerun_can_remake_the_rest(seeded, tmp_path):
    with Lake(seeded) as lake:
        counts = _counts(lake)
        files = lake.arrow("SELECT data_file, data_file_size_bytes FROM ducklake_list_files('lake', 'views')")
        lost = files["data_file"][0].as_py()
        lost_rows = duckdb.sql(f"SELECT count(*) FROM read_parquet('{lost}')").fetchone()[0]
    Path(lost).unlink()
    with Lake(seeded) as lake:
        report = repair_lake(lake, seeded.parent)
        assert report.rebuilt == {"views": counts["views"] - lost_rows} and report.lost_files == [lost]
        assert report.after is not None and report.after.ok
        assert _counts(lake) == {**counts, "views": counts["views"] - lost_rows}
        assert report.dropped_snapshots == [], "the pairs were intact, so the snapshot stays"


def test_repair_after_an_old_catalog_was_restored_takes_back_the_newer_views(seeded, tmp_path):
    backup = tmp_path / "catalog-backup.sqlite"
    shutil.copy(seeded / "catalog.sqlite", backup)
    with Lake(seeded) as lake:
        before = _counts(lake)
        extra = [{"view_id": "C-s0", "sentence_id": "s0", "augmenter": "C", "config_hash": "hC", "text": "c",
                  "lang": "en", "status": "kept"}]  # fmt: skip
        lake.append("views", pa.Table.from_pylist(extra, schema=VIEWS))
    for wal in seeded.glob("catalog.sqlite-*"):
        wal.unlink()
    shutil.copy(backup, seeded / "catalog.sqlite")  # the restore: the catalog forgets view C-s0
    with Lake(seeded) as lake:
        assert _counts(lake) == before
        assert [p.kind for p in verify_lake(lake).errors] == ["orphan"]
        report = repair_lake(lake, seeded.parent)
        assert report.recovered == {"views": 1} and report.after is not None and report.after.ok
        assert lake.arrow("SELECT view_id, text FROM views WHERE augmenter = 'C'").to_pylist() == [
            {"view_id": "C-s0", "text": "c"}
        ]
        assert _counts(lake) == {**before, "views": before["views"] + 1}
    assert len(list(Path(report.moved_to).rglob("*.parquet"))) == 1, "the orphan is moved aside, not deleted"


KILLED_AFTER_COMMIT = """
import sys
from pathlib import Path
from viewmill.storage.lake import Lake
from tests.lake_state import seed_views
with Lake(Path(sys.argv[1])) as lake:
    seed_views(lake, 6, 3)
"""


def test_a_writer_killed_right_after_a_commit_leaves_no_committed_file_without_its_hash(tmp_path):
    """SIGKILL between COMMIT and the writer's hash record (the `committed` crash point): the
    files were recorded before the commit, so the next run's checks trust them."""
    import os
    import subprocess
    import sys

    from viewmill.storage.crash_points import CRASH_ENV

    from tests.conftest import REPO

    root = tmp_path / "state" / "lake"
    env = {**os.environ, CRASH_ENV: "committed"}
    killed = subprocess.run([sys.executable, "-c", KILLED_AFTER_COMMIT, str(root)], env=env, cwd=REPO, timeout=300)
    assert killed.returncode == -9, "killed at its first commit"
    with Lake(root) as lake:
        assert lake.scalar("SELECT count(*) FROM sentences") == 2, "the first chunk committed"
        report = verify_lake(lake)
        assert report.of_kind("unhashed", "orphan") == [] and report.errors == [], report.errors
        lake.require_intact(("sentences", "views"), "pair")  # the check a rerun's pairing makes
        seed_views(lake, 6, 3)  # and the rerun writes on


def test_a_commit_looks_only_at_the_folders_it_wrote_to_not_every_file_of_the_lake(tmp_path, monkeypatch):
    """Issue 32: finding a transaction's files before its COMMIT must not list or stat the
    whole lake (a run commits thousands of times into a growing lake: quadratic)."""
    import os

    import viewmill.storage.lake_writes as lake_writes

    def add_view(lake: Lake, augmenter: str) -> None:
        row = {"view_id": f"{augmenter}-s0", "sentence_id": "s0", "augmenter": augmenter, "text": augmenter}
        with lake.transaction():
            lake.append("views", pa.Table.from_pylist([row], schema=VIEWS))

    with Lake(tmp_path / "lake") as lake:
        seed_views(lake, 6, 3)
        sentences = Path(lake.data_path) / "main" / "sentences"
        hour_ago = os.stat(sentences).st_mtime - 3600
        os.utime(sentences, (hour_ago, hour_ago))  # long unchanged, so a listing of it stays true
        add_view(lake, "C")  # the first commit of a process lists the lake once
        for old in sentences.glob("*.parquet"):  # a time that a whole-lake scan would take for new
            os.utime(old, (hour_ago + 7200, hour_ago + 7200))
        listed, recorded = [], []
        scandir, record_written = os.scandir, lake_writes.record_written

        def listing(path="."):
            listed.append(str(path))
            return scandir(path)

        def recording(con, data_path, rels, key):
            recorded.extend(rels)
            record_written(con, data_path, rels, key)

        monkeypatch.setattr(os, "scandir", listing)
        monkeypatch.setattr(lake_writes, "record_written", recording)
        add_view(lake, "D")
        assert [rel.rsplit("/", 1)[0] for rel in recorded] == ["main/views/augmenter=D"]
        assert not [path for path in listed if path.startswith(str(sentences))], listed


def test_a_transaction_alone_in_its_turn_asks_the_catalog_for_new_files_once_after_its_commit(tmp_path, monkeypatch):
    """Issue 32: each catalog query costs ~10 ms a commit; the turn's own check after a lone
    transaction (recorded already) was a third `next_file_id`."""
    import viewmill.storage.lake_writes as lake_writes

    with Lake(tmp_path / "lake") as lake:
        seed_views(lake, 2, 1)
        asked, next_file_id = [], lake_writes.next_file_id
        monkeypatch.setattr(lake_writes, "next_file_id", lambda con, **kw: asked.append(1) or next_file_id(con, **kw))
        with lake.transaction():
            lake.append("views", pa.Table.from_pylist([{"view_id": "C-s0", "augmenter": "C"}], schema=VIEWS))
        assert len(asked) == 2, "when the lock is taken, and after the commit"
        assert verify_lake(lake).of_kind("unhashed", "orphan") == []


def test_a_commit_finds_its_new_files_without_reading_the_catalogs_older_file_rows(tmp_path):
    """Issue 32: DuckDB's SQLite scanner read every row of the catalog's file table to find a
    commit's new files (each commit's cost grew with the lake). An older row made unreadable
    fails the commit only where it is read."""
    import sqlite3

    with Lake(tmp_path / "lake") as lake:
        seed_views(lake, 2, 1)
    catalog = sqlite3.connect(tmp_path / "lake" / "catalog.sqlite")
    with catalog:
        catalog.execute(
            "UPDATE ducklake_data_file SET file_size_bytes = 'unreadable' "
            "WHERE data_file_id = (SELECT min(data_file_id) FROM ducklake_data_file)"
        )
    catalog.close()
    with Lake(tmp_path / "lake") as lake, lake.transaction():
        lake.append("views", pa.Table.from_pylist([{"view_id": "C-s0", "augmenter": "C"}], schema=VIEWS))


def test_a_processs_first_commit_looks_at_no_file_in_folders_unchanged_since_it_began(tmp_path, monkeypatch):
    """Issue 32: the first commit of each shard job stat-ed every Parquet file of the lake to
    find its own (a cost growing with the lake); a folder older than the transaction holds none."""
    with Lake(tmp_path / "lake") as lake:
        seed_views(lake, 6, 3)
    hour_ago = time.time() - 3600
    for folder in (tmp_path / "lake" / "data").rglob("*"):
        if folder.is_dir():
            os.utime(folder, (hour_ago, hour_ago))
    looked, stat = [], os.stat

    def looking(path, *args, **kwargs):
        looked.append(str(path))
        return stat(path, *args, **kwargs)

    with Lake(tmp_path / "lake") as lake:
        monkeypatch.setattr(os, "stat", looking)
        with lake.transaction():
            lake.append("views", pa.Table.from_pylist([{"view_id": "D-s0", "augmenter": "D"}], schema=VIEWS))
        monkeypatch.undo()
        assert verify_lake(lake).of_kind("unhashed", "orphan") == []
    new_file = {str(path) for path in (tmp_path / "lake" / "data").rglob("augmenter=D/*.parquet")}
    assert {path for path in looked if path.endswith(".parquet")} == new_file
