"""Every file viewmill writes gets a signed content hash, and what pairing, training and
compaction read is checked against it (real DuckLake lakes, SQLite catalog, Parquet files)."""

import hashlib
import json
import re
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from viewmill.storage.file_hashes import RECORD_DIR
from viewmill.storage.integrity import verify_lake
from viewmill.storage.lake import Lake, LakeError
from viewmill.storage.lake_files import catalog_files
from viewmill.storage.repair import repair_lake
from viewmill.storage.schema import VIEWS
from viewmill.storage.snapshots import read_pairs

from tests.lake_state import change_in_place, lake_state, pair_views, paired_lake
from tests.postgres import needs_postgres


@pytest.fixture
def lake_root(tmp_path) -> Path:
    root = tmp_path / "state" / "lake"
    paired_lake(root)
    return root


def _file_holding(root: Path, table: str, text: bytes) -> str:
    """The current data file of `table` whose bytes hold `text`."""
    with Lake(root, read_only=True) as lake:
        files = lake.arrow(f"SELECT data_file FROM ducklake_list_files('lake', '{table}')")["data_file"].to_pylist()
    found = [f for f in files if text in Path(f).read_bytes()]
    assert len(found) == 1, found
    return found[0]


def _sha256(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_every_commit_records_a_signed_hash_of_each_file_it_added_merges_and_deletes_included(lake_root):
    with Lake(lake_root) as lake:
        with lake.transaction():
            lake.con.execute("DELETE FROM views WHERE view_id = 'B-s1'")  # a delete file
        lake.compact()  # merged files keep their sources' first snapshot: found by file id
        listed = catalog_files(lake.con, lake.data_path)
        records = lake.hash_records()
    kinds = {(f.table, f.kind) for f in listed}
    assert {("views", "delete"), ("views", "data"), ("pairs", "data")} <= kinds
    assert records.foreign == 0
    for entry in listed:  # each file's record is its whole content, as it is on disk
        (digest,) = records.known[entry.rel]
        assert (digest.size, digest.sha256) == (Path(entry.location).stat().st_size, _sha256(entry.location))
    on_disk = {str(p.relative_to(lake_root / "data")) for p in (lake_root / "data").rglob("*.parquet")}
    assert set(records.known) == on_disk, "merged-away files (still on disk until cleanup) keep theirs"
    lines = [json.loads(line) for p in (lake_root / "data" / RECORD_DIR).glob("*.json") for line in p.open()]
    assert len(lines) == len(on_disk) and all(re.fullmatch(r"[0-9a-f]{64}", line["sig"]) for line in lines)


def test_pairing_refuses_a_views_file_changed_in_place_and_writes_nothing(lake_root):
    changed = _file_holding(lake_root, "views", b"view A of s0")
    before = lake_state(lake_root)
    recorded = _sha256(changed)
    change_in_place(changed, b"view A of s0", b"VIEW A of s0")  # same size, footer intact
    with Lake(lake_root, read_only=True) as lake:  # the changed text is what SQL now serves
        assert lake.scalar("SELECT text FROM views WHERE view_id = 'A-s0'") == "VIEW A of s0"
    with Lake(lake_root) as lake:
        version = lake.scalar("SELECT corpus_version FROM corpus_versions")
        with pytest.raises(LakeError) as refused:
            pair_views(lake, version)
    size = Path(changed).stat().st_size
    assert str(refused.value) == (
        f"cannot pair the views of corpus 'c': the views data file {changed} changed since viewmill wrote it "
        f"(sha256 {_sha256(changed)[:16]} ({size} bytes), not the {recorded[:16]} ({size} bytes) recorded when "
        "viewmill wrote it): run `viewmill lake verify` to list the damage and `viewmill lake repair` to set the "
        "damaged files aside (intact rows are kept), then rerun the recipe to remake what was lost"
    )
    assert lake_state(lake_root) == before, "no snapshot frozen from the changed text"


def test_training_refuses_a_pairs_file_changed_in_place(lake_root):
    pairs_file = _file_holding(lake_root, "pairs", b"view A of s0")
    before = lake_state(lake_root)
    (snapshot,) = before["snapshots"]
    change_in_place(pairs_file, b"view A of s0", b"VIEW A of s0")
    with Lake(lake_root, read_only=True) as lake, pytest.raises(LakeError) as refused:
        read_pairs(lake, snapshot, purpose=f"train on pairs snapshot '{snapshot}'")
    message = str(refused.value)
    assert message.startswith(
        f"cannot train on pairs snapshot '{snapshot}': the pairs data file {pairs_file} changed since viewmill wrote it"
    )
    assert "`viewmill lake verify`" in message and "`viewmill lake repair`" in message
    assert lake_state(lake_root) == before


def test_compaction_refuses_to_merge_a_changed_file_into_a_freshly_hashed_one(lake_root):
    changed = _file_holding(lake_root, "views", b"view A of s0")
    change_in_place(changed, b"view A of s0", b"VIEW A of s0")
    before, files = lake_state(lake_root), sorted((lake_root / "data").rglob("*.parquet"))
    with Lake(lake_root) as lake, pytest.raises(LakeError) as refused:
        lake.compact()
    assert str(refused.value).startswith(f"cannot compact the lake: the views data file {changed} changed since")
    assert lake_state(lake_root) == before and sorted((lake_root / "data").rglob("*.parquet")) == files


def test_a_record_signed_by_another_lake_is_ignored(lake_root, tmp_path):
    """Files and hash records copied from another lake (same layout, valid Parquet, right
    columns) are not this lake's: verify ignores the records, repair adopts nothing."""
    other = tmp_path / "other" / "lake"
    with Lake(other) as lake:
        lake.append("views", pa.Table.from_pylist([_row("X-s0", "stranger")], schema=VIEWS))
        (entry,) = [f for f in catalog_files(lake.con, lake.data_path) if f.table == "views"]
    shutil.copy(entry.location, lake_root / "data" / entry.rel)
    for record in (other / "data" / RECORD_DIR).glob("*.json"):
        shutil.copy(record, lake_root / "data" / RECORD_DIR / record.name)
    before = lake_state(lake_root)
    with Lake(lake_root) as lake:
        report = verify_lake(lake)
        assert report.foreign_records == 1
        assert [(p.kind, p.path) for p in report.errors] == [("orphan", str(lake_root / "data" / entry.rel))]
        repaired = repair_lake(lake, lake_root.parent)
    assert repaired.recovered == {} and repaired.not_taken_back == [
        (
            str(lake_root / "data" / entry.rel),
            "no record that viewmill wrote it into this lake (not in the lake's signed hash record)",
        )
    ]
    assert lake_state(lake_root) == before, "nothing written"
    assert (Path(repaired.moved_to) / entry.rel).is_file(), "moved aside, never deleted"


@needs_postgres
def test_hashes_are_recorded_checked_and_repaired_with_a_postgresql_catalog(tmp_path, postgres_dsn):
    """The signing key lives in the state folder's key file, not in PostgreSQL; the records beside the data."""
    import psycopg

    with psycopg.connect(postgres_dsn, autocommit=True) as server:
        server.execute("CREATE DATABASE file_hashes")
    catalog = "postgres:" + postgres_dsn.replace("dbname=viewmill", "dbname=file_hashes")
    root, data = tmp_path / "state" / "lake", str(tmp_path / "data")
    with Lake(root, catalog=catalog, data_path=data) as lake:
        for view_id, text in (("A-s0", "first text"), ("A-s1", "second text")):
            with lake.transaction():
                lake.append("views", pa.Table.from_pylist([_row(view_id, text)], schema=VIEWS))
        assert verify_lake(lake).problems == []
        (changed,) = [f.location for f in catalog_files(lake.con, data, tables=("views",)) if b"second" in
                      Path(f.location).read_bytes()]  # fmt: skip
    change_in_place(changed, b"second text", b"SECOND TEXT")
    with Lake(root, catalog=catalog, data_path=data) as lake:
        assert [(p.kind, p.path) for p in verify_lake(lake).errors] == [("content", changed)]
        repaired = repair_lake(lake, root.parent)
        assert repaired.rebuilt == {"views": 1} and repaired.after is not None and repaired.after.ok
        assert lake.arrow("SELECT view_id, text FROM views").to_pylist() == [{"view_id": "A-s0", "text": "first text"}]


def _row(view_id: str, text: str) -> dict:
    return {"view_id": view_id, "sentence_id": "s0", "augmenter": "A", "config_hash": "hA", "text": text,
            "lang": "en", "status": "kept"}  # fmt: skip
