"""A snapshot whose hard negatives go to only some pairings' pairs (`pair.negatives.pairings`):
written, read back with an empty list for the others, noted, verified and exported."""

import json

import pyarrow.parquet as pq
import pytest
from viewmill.storage.integrity import verify_lake
from viewmill.storage.lake import Lake, LakeError
from viewmill.storage.negatives import NliContradictions
from viewmill.storage.snapshots import create_pairs_snapshot, export_snapshot, read_pairs, stored_negatives

from tests.storage.test_negatives import N_SENTENCES, _nli_lake

FORWARD, BACKWARD = ("ha", "hb"), ("hb", "ha")  # view a with view b, and b with a


def _mixed(lake: Lake, version: str, negative_pairings=(FORWARD,)):
    spec = NliContradictions(source="nli-contradiction", pairings=[["A", "B"]])
    return create_pairs_snapshot(lake, recipe="r", corpus="c", corpus_version=version, pairings=[FORWARD, BACKWARD],
                                 run_id="run", negatives=spec, negative_pairings=list(negative_pairings))  # fmt: skip


def _by_pair(lake: Lake, snapshot: str) -> dict[tuple[str, str], list[str]]:
    pairs = read_pairs(lake, snapshot)
    columns = (pairs[name].to_pylist() for name in ("sentence_id", "text_a", "negatives"))
    sides = zip(*columns, strict=True)
    return {(sid, text.split()[1]): negatives for sid, text, negatives in sides}


def test_only_the_chosen_pairings_pairs_get_negatives_the_others_an_empty_list(tmp_path):
    with Lake(tmp_path / "lake") as lake:
        version = _nli_lake(lake)
        snap = _mixed(lake, version)
        found = _by_pair(lake, snap.name)
        # a-b pairs of s0 and s1 have contradictions (s2, s3's dropped); every b-a pair stays, with none
        assert set(found) == {("s0", "a"), ("s1", "a")} | {(f"s{i}", "b") for i in range(N_SENTENCES)}
        assert found[("s1", "a")] == ["text h4"] and len(found[("s0", "a")]) == 1
        assert all(found[(f"s{i}", "b")] == [] for i in range(N_SENTENCES)), "s0's b-a pair has no negatives"
        note = json.loads(lake.scalar("SELECT negatives FROM snapshots WHERE snapshot = ?", [snap.name]))
        assert (note["with_negatives"], note["dropped"], note["pairings"]) == (2, 2, [["A", "B"]])
        assert snap.n_pairs == 2 + N_SENTENCES and stored_negatives(lake, snap.name).num_rows == 2
        report = verify_lake(lake)
        assert report.ok, [p.line() for p in report.problems]
        every = create_pairs_snapshot(lake, recipe="r", corpus="c", corpus_version=version,
                                      pairings=[FORWARD, BACKWARD], run_id="run",
                                      negatives=NliContradictions(source="nli-contradiction"))  # fmt: skip
        assert every.name != snap.name and every.n_pairs == 4, "without pairings, every pairing's pairs need them"


def test_a_mixed_snapshot_exports_empty_lists_and_refuses_the_sentence_transformers_layout(tmp_path):
    with Lake(tmp_path / "lake") as lake:
        snap = _mixed(lake, _nli_lake(lake))
        assert export_snapshot(lake, snap.name, tmp_path / "out.parquet") == snap.n_pairs
        lists = pq.read_table(tmp_path / "out.parquet")["negatives"].to_pylist()
        assert sorted(len(n) for n in lists) == [0] * N_SENTENCES + [1, 1]
        with pytest.raises(LakeError, match="negatives to 2 of its 6 pairs.*--layout viewmill"):
            export_snapshot(lake, snap.name, tmp_path / "st.parquet", layout="sentence-transformers")


def test_a_lost_negative_of_a_mixed_snapshot_is_caught(tmp_path):
    with Lake(tmp_path / "lake") as lake:
        snap = _mixed(lake, _nli_lake(lake))
        with lake.transaction():
            lake.con.execute("DELETE FROM pair_negatives WHERE text = 'text h4'")
        with pytest.raises(LakeError, match="has 6 pairs, 2 with 1 negative.*lake's rows differ"):
            read_pairs(lake, snap.name)
