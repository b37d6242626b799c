"""`train --snapshot NAME` refused from the SQLite catalog alone only where the lake cannot hold
NAME, in the words the DuckDB lookup uses; a lake with a snapshot goes to the lookup."""

import sqlite3

import pyarrow as pa
import pytest
from viewmill.pipelines.cli.snapshot_names import refuse_snapshot_early
from viewmill.storage.lake import Lake, LakeError
from viewmill.storage.schema import SNAPSHOTS
from viewmill.storage.snapshots import snapshot_info

ROW = {"snapshot": "s1", "recipe": "r", "corpus": "c", "content_hash": "h", "n_pairs": 1, "lake_version": 1}


def _lookup_message(root, name: str) -> str:
    with Lake(root, read_only=True) as lake, pytest.raises(LakeError) as refused:
        snapshot_info(lake, name)
    return str(refused.value)


def test_a_lake_without_snapshots_is_refused_in_the_lookups_words(tmp_path):
    Lake(tmp_path / "lake").close()
    with pytest.raises(LakeError) as early:
        refuse_snapshot_early(tmp_path / "lake", "nope", None, data_path=None)
    assert str(early.value) == _lookup_message(tmp_path / "lake", "nope")


def test_a_missing_lake_is_named(tmp_path):
    with pytest.raises(LakeError, match=f"no lake at {tmp_path / 'lake'}: run a recipe first"):
        refuse_snapshot_early(tmp_path / "lake", "nope", None, data_path=None)


def test_a_lake_with_a_snapshot_is_left_to_the_lookup(tmp_path):
    with Lake(tmp_path / "lake") as lake:
        lake.append("snapshots", pa.Table.from_pylist([ROW], schema=SNAPSHOTS))
    refuse_snapshot_early(tmp_path / "lake", "s1", None, data_path=None)  # known: not refused
    refuse_snapshot_early(tmp_path / "lake", "nope", None, data_path=None)  # unknown: the lookup names the known
    assert "known: s1" in _lookup_message(tmp_path / "lake", "nope")


def test_a_catalog_of_another_layout_is_left_to_the_lookup(tmp_path):
    (tmp_path / "lake").mkdir()
    sqlite3.connect(tmp_path / "lake" / "catalog.sqlite").close()  # no DuckLake tables in it
    refuse_snapshot_early(tmp_path / "lake", "nope", None, data_path=None)
