import pyarrow as pa
import pytest

from storage.lake import Lake, LakeError
from storage.schema import SENTENCES, VIEWS
from storage.snapshots import create_pairs_snapshot, read_pairs


def _seed(lake: Lake, statuses_b: list[str]) -> None:
    sentences, views = [], []
    for i, status_b in enumerate(statuses_b):
        sid = f"s{i}"
        sentences.append({"corpus": "c", "sentence_id": sid, "text": f"text {i}", "lang": "en"})
        views.append(
            {
                "view_id": f"a{i}",
                "sentence_id": sid,
                "augmenter": "A",
                "config_hash": "ha",
                "text": f"view a {i}",
                "lang": "en",
                "status": "kept",
            }
        )
        views.append(
            {
                "view_id": f"b{i}",
                "sentence_id": sid,
                "augmenter": "B",
                "config_hash": "hb",
                "text": f"view b {i}",
                "lang": "en",
                "status": status_b,
            }
        )
    lake.append("sentences", pa.Table.from_pylist(sentences, schema=SENTENCES))
    lake.append("views", pa.Table.from_pylist(views, schema=VIEWS))


def test_snapshot_pairs_kept_views_and_is_content_addressed(tmp_path):
    with Lake(tmp_path / "lake") as lake:
        _seed(lake, ["kept", "rejected", "kept"])
        snap = create_pairs_snapshot(lake, recipe="r", corpus="c", config_a="ha", configs_b=["hb"], run_id="run1")
        assert snap.created and snap.n_pairs == 2
        again = create_pairs_snapshot(lake, recipe="r", corpus="c", config_a="ha", configs_b=["hb"], run_id="run2")
        assert not again.created and again.name == snap.name
        pairs = read_pairs(lake, snap.name)
        assert sorted(pairs["sentence_id"].to_pylist()) == ["s0", "s2"]
        assert lake.scalar("SELECT count(*) FROM pairs") == 2  # never written twice
        listed = lake.arrow("SELECT snapshot, n_pairs, lake_version FROM snapshots").to_pylist()
        assert listed == [{"snapshot": snap.name, "n_pairs": 2, "lake_version": snap.lake_version}]


def test_new_pairs_make_a_new_snapshot_and_leave_the_old_one_unchanged(tmp_path):
    with Lake(tmp_path / "lake") as lake:
        _seed(lake, ["kept", "rejected"])
        first = create_pairs_snapshot(lake, recipe="r", corpus="c", config_a="ha", configs_b=["hb"], run_id="1")
        lake.con.execute("UPDATE views SET status = 'kept'")  # e.g. relaxed filters
        second = create_pairs_snapshot(lake, recipe="r", corpus="c", config_a="ha", configs_b=["hb"], run_id="2")
        assert second.name != first.name
        assert read_pairs(lake, first.name).num_rows == 1
        assert read_pairs(lake, second.name).num_rows == 2


def test_unknown_snapshot_and_empty_pairing_give_clear_errors(tmp_path):
    with Lake(tmp_path / "lake") as lake:
        _seed(lake, ["rejected"])
        with pytest.raises(LakeError, match="no pairs snapshot named 'nope'"):
            read_pairs(lake, "nope")
        with pytest.raises(LakeError, match="check the filters"):
            create_pairs_snapshot(lake, recipe="r", corpus="c", config_a="ha", configs_b=["hb"], run_id="1")
