"""Hard negatives in the lake: written with their snapshot, covered by its content hash, read
back beside the pairs, NLI contradictions as negatives, and the sentence-transformers export."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from viewmill.storage.corpus_versions import record_corpus_version
from viewmill.storage.integrity import verify_lake
from viewmill.storage.lake import Lake, LakeError
from viewmill.storage.negatives import ROWS, NliContradictions
from viewmill.storage.pair_hashes import pairs_content_hash
from viewmill.storage.schema import NLI_PAIRS, SENTENCES, VIEWS
from viewmill.storage.snapshots import (
    create_pairs_snapshot,
    export_snapshot,
    read_pairs,
)

N_SENTENCES = 4
# The hash a plain snapshot of these rows had before negatives existed (storage/snapshots.py at
# the commit that added them): plain snapshots keep their names.
PLAIN = pa.table({"pair_id": ["p2", "p1", "p3"], "sentence_id": ["s2", "s1", "s3"], "text_a": ["b", "a", "c"],
                  "text_b": ["B", "A", "C"], "lang_a": ["en"] * 3, "lang_b": ["en", "en", "es"]})  # fmt: skip
PLAIN_HASH = "4bef052ffe5f2dbea4892f548f4898b6"


def _seed(lake: Lake) -> str:
    sentences, views = [], []
    for i in range(N_SENTENCES):
        sentences.append({"corpus": "c", "sentence_id": f"s{i}", "text": f"sentence {i}", "lang": "en"})
        for side in ("a", "b"):
            view = {"view_id": f"{side}{i}", "sentence_id": f"s{i}", "augmenter": side.upper(), "lang": "en"}
            views.append({**view, "config_hash": f"h{side}", "text": f"view {side} {i}", "status": "kept"})
    lake.append("sentences", pa.Table.from_pylist(sentences, schema=SENTENCES))
    lake.append("views", pa.Table.from_pylist(views, schema=VIEWS))
    return record_corpus_version(lake, "c", [s["sentence_id"] for s in sentences], run_id="seed")


class Listed:
    """A negatives source handing out given texts per sentence (as a miner would), counting calls."""

    source = "mined"

    def __init__(self, per_anchor: int, texts: dict[str, list[str]], key: dict | None = None) -> None:
        self.per_anchor, self.texts, self.key, self.calls = per_anchor, texts, key, 0

    def reads(self) -> tuple[str, ...]:
        return ()

    def reuse_key(self) -> dict | None:
        return self.key

    def negatives(self, lake: Lake, pairs: pa.Table, corpus_version: str) -> pa.Table:
        self.calls += 1
        rows = []
        for pair_id, sid in zip(pairs["pair_id"].to_pylist(), pairs["sentence_id"].to_pylist(), strict=True):
            for rank, text in enumerate(self.texts.get(sid, []), start=1):
                row = {"pair_id": pair_id, "rank": rank, "sentence_id": f"n-{text}", "text": text}
                rows.append({**row, "source": "mined", "miner": '{"m":1}', "score": 1.0 / rank})
        return pa.Table.from_pylist(rows, schema=ROWS)


TEXTS = {"s0": ["x0", "y0"], "s1": ["x1", "y1"], "s2": ["x2"]}  # s2 has too few, s3 none


def _snapshot(lake: Lake, version: str, negatives=None):
    return create_pairs_snapshot(lake, recipe="r", corpus="c", corpus_version=version,
                                 pairings=[("ha", "hb")], run_id="run", negatives=negatives)  # fmt: skip


def test_negatives_are_written_with_their_pairs_and_read_back_by_rank(tmp_path):
    with Lake(tmp_path / "lake") as lake:
        version = _seed(lake)
        plain = _snapshot(lake, version)
        before = lake.version()
        snap = _snapshot(lake, version, Listed(2, TEXTS))
        assert lake.version() == before + 1, "pairs, negatives and the snapshot row commit together"
        assert snap.created and snap.n_pairs == 2 and snap.name != plain.name
        pairs = read_pairs(lake, snap.name)
        assert pairs.schema.field("negatives").type == pa.list_(pa.string())
        assert dict(zip(pairs["sentence_id"].to_pylist(), pairs["negatives"].to_pylist(), strict=True)) == {
            "s0": ["x0", "y0"], "s1": ["x1", "y1"]
        }  # fmt: skip
        note = json.loads(lake.scalar("SELECT negatives FROM snapshots WHERE snapshot = ?", [snap.name]))
        assert (note["source"], note["per_anchor"], note["dropped"]) == ("mined", 2, 2)
        assert lake.scalar("SELECT count(*) FROM pair_negatives WHERE snapshot = ?", [snap.name]) == 4
        assert read_pairs(lake, plain.name).column_names == ["pair_id", "sentence_id", "text_a", "text_b"]
        assert lake.scalar("SELECT negatives FROM snapshots WHERE snapshot = ?", [plain.name]) is None
        report = verify_lake(lake)
        assert report.ok and not report.legacy_snapshots, [p.line() for p in report.problems]
        with pytest.raises(LakeError, match="none of the 4 pairs got 3 mined negative"):
            _snapshot(lake, version, Listed(3, TEXTS))


def test_the_content_hash_covers_the_negatives_and_keeps_plain_snapshots_names():
    assert pairs_content_hash("r", PLAIN) == PLAIN_HASH
    rows = [{"pair_id": p, "rank": r, "sentence_id": f"n{p}{r}", "text": f"neg {p} {r}", "source": "mined",
             "miner": "{}", "score": 0.5} for p in ("p1", "p2", "p3") for r in (1, 2)]  # fmt: skip
    negatives = pa.Table.from_pylist(rows, schema=ROWS)
    with_negatives = pairs_content_hash("r", PLAIN, negatives)
    assert with_negatives != PLAIN_HASH
    assert pairs_content_hash("r", PLAIN, negatives.take([5, 3, 1, 0, 2, 4])) == with_negatives, "row order"
    for column, value in (("text", "other"), ("score", 0.25), ("rank", 7), ("miner", '{"x":1}')):
        changed = pa.Table.from_pylist([{**rows[0], column: value}, *rows[1:]], schema=ROWS)
        assert pairs_content_hash("r", PLAIN, changed) != with_negatives, column


def test_changed_or_missing_negatives_are_caught(tmp_path):
    with Lake(tmp_path / "lake") as lake:
        snap = _snapshot(lake, _seed(lake), Listed(2, TEXTS))
        with lake.transaction():  # viewmill's write path: the new files are trusted, the content is not
            lake.con.execute("UPDATE pair_negatives SET text = 'tampered' WHERE text = 'y1'")
        problems = verify_lake(lake).of_kind("snapshot")
        assert [(p.path, p.detail) for p in problems] == [(snap.name, "content hash differs from the recorded one")]
        with lake.transaction():
            lake.con.execute("DELETE FROM pair_negatives WHERE text = 'x0'")
        with pytest.raises(LakeError, match="2 pairs with 2 negative.*lake's rows differ.*lake verify"):
            read_pairs(lake, snap.name)


def test_an_equal_reuse_key_finds_the_snapshot_without_computing_negatives(tmp_path):
    with Lake(tmp_path / "lake") as lake:
        version = _seed(lake)
        first = _snapshot(lake, version, Listed(2, TEXTS, key={"encoder": "e", "fingerprint": "f"}))
        again = Listed(2, TEXTS, key={"fingerprint": "f", "encoder": "e"})
        reused = _snapshot(lake, version, again)
        assert again.calls == 0 and reused.name == first.name and not reused.created
        other = Listed(2, TEXTS, key={"encoder": "e", "fingerprint": "g"})
        same = _snapshot(lake, version, other)
        assert other.calls == 1 and same.name == first.name and not same.created, "same content, same snapshot"


def _nli_lake(lake: Lake) -> str:
    version = _seed(lake)
    links = [("s0", "h1", "contradiction"), ("s0", "h2", "contradiction"), ("s0", "h3", "contradiction"),
             ("s0", "e0", "entailment"), ("s1", "h4", "contradiction"), ("s1", "h5", "neutral"),
             ("s3", "h6", "contradiction")]  # fmt: skip
    rows = [{"corpus": "c", "pair_id": f"{p}-{h}", "premise_id": p, "premise_text": f"sentence {p[1]}",
             "hypothesis_id": h, "hypothesis_text": "view b 3" if h == "h6" else f"text {h}", "label": label}
            for p, h, label in links]  # fmt: skip
    lake.append("nli_pairs", pa.Table.from_pylist(rows, schema=NLI_PAIRS))
    return version


def _by_sentence(lake: Lake, snapshot: str) -> dict[str, list[str]]:
    pairs = read_pairs(lake, snapshot)
    return dict(zip(pairs["sentence_id"].to_pylist(), pairs["negatives"].to_pylist(), strict=True))


def test_a_premises_contradictions_are_its_negatives(tmp_path):
    with Lake(tmp_path / "lake") as lake:
        version = _nli_lake(lake)
        one = _snapshot(lake, version, NliContradictions(source="nli-contradiction"))
        found = _by_sentence(lake, one.name)
        assert set(found) == {"s0", "s1"}, "s2 has no contradiction, s3's is its own positive's text"
        assert found["s1"] == ["text h4"] and found["s0"][0] in {"text h1", "text h2", "text h3"}
        rows = lake.arrow("SELECT source, miner, score FROM pair_negatives WHERE snapshot = ?", [one.name])
        assert set(rows["source"].to_pylist()) == {"nli-contradiction"} and rows["score"].null_count == 2
        assert json.loads(rows["miner"][0].as_py()) == {"labels": ["contradiction"], "seed": 0}
        note = json.loads(lake.scalar("SELECT negatives FROM snapshots WHERE snapshot = ?", [one.name]))
        assert note["dropped"] == 2
        picks = set()
        for seed in range(8):
            spec = NliContradictions(source="nli-contradiction", per_anchor=2, seed=seed)
            two = _by_sentence(lake, _snapshot(lake, version, spec).name)
            assert list(two) == ["s0"] and len(set(two["s0"])) == 2
            assert set(two["s0"]) < {"text h1", "text h2", "text h3"}
            assert _by_sentence(lake, _snapshot(lake, version, spec).name) == two, "a seed's choice is stable"
            picks.add(tuple(two["s0"]))
        assert len(picks) > 1, "the seed chooses among a premise's contradictions"
        neutral = NliContradictions(source="nli-contradiction", per_anchor=2, labels=["contradiction", "neutral"])
        assert sorted(_by_sentence(lake, _snapshot(lake, version, neutral).name)["s1"]) == ["text h4", "text h5"]


@pytest.mark.parametrize("per_anchor", [0, 1, 2])
@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "hf"])
def test_the_sentence_transformers_layout(tmp_path, per_anchor, fmt):
    from datasets import Dataset

    with Lake(tmp_path / "lake") as lake:
        version = _seed(lake)
        snap = _snapshot(lake, version, Listed(per_anchor, TEXTS) if per_anchor else None)
        expected = read_pairs(lake, snap.name)
        out = tmp_path / "out" / {"parquet": "st.parquet", "jsonl": "st.jsonl", "hf": "st"}[fmt]
        assert export_snapshot(lake, snap.name, out, fmt, layout="sentence-transformers") == snap.n_pairs
        viewmill = export_snapshot(lake, snap.name, tmp_path / "pairs.parquet")
    if fmt == "hf":
        table = Dataset.load_from_disk(str(out)).data.table
    elif fmt == "jsonl":
        table = pa.Table.from_pylist([json.loads(line) for line in out.read_text().splitlines()])
    else:
        table = pq.read_table(out)
    negatives = {0: [], 1: ["negative"], 2: ["negative_1", "negative_2"]}[per_anchor]
    assert table.column_names == ["anchor", "positive", *negatives]
    assert table["anchor"].to_pylist() == expected["text_a"].to_pylist()
    assert table["positive"].to_pylist() == expected["text_b"].to_pylist()
    for i, name in enumerate(negatives):
        assert table[name].to_pylist() == [n[i] for n in expected["negatives"].to_pylist()]
    lake_layout = pq.read_table(tmp_path / "pairs.parquet")
    assert viewmill == snap.n_pairs and ("negatives" in lake_layout.column_names) == bool(per_anchor)
    assert sorted(p.name for p in out.parent.iterdir()) == [out.name], "nothing partial left behind"


def test_export_refuses_an_unknown_layout_or_format(tmp_path):
    with Lake(tmp_path / "lake") as lake:
        snap = _snapshot(lake, _seed(lake))
        with pytest.raises(LakeError, match="unknown export layout 'st': use viewmill or sentence-transformers"):
            export_snapshot(lake, snap.name, tmp_path / "x.parquet", layout="st")
        with pytest.raises(LakeError, match="name it .parquet or .jsonl, or pass --format.*hf for a Hugging Face"):
            export_snapshot(lake, snap.name, tmp_path / "folder")
        (tmp_path / "file").write_text("x")
        with pytest.raises(LakeError, match="is a file: --format hf writes a folder"):
            export_snapshot(lake, snap.name, tmp_path / "file", "hf")


def test_a_lake_made_before_negatives_reads_and_then_gains_the_table(tmp_path):
    with Lake(tmp_path / "lake") as lake:
        version = _seed(lake)
        plain = _snapshot(lake, version)
        with lake.transaction():  # as an older viewmill left it
            lake.con.execute("DROP TABLE pair_negatives")
            lake.con.execute("ALTER TABLE snapshots DROP COLUMN negatives")
    with Lake(tmp_path / "lake", read_only=True) as old:
        assert read_pairs(old, plain.name).num_rows == N_SENTENCES
    with Lake(tmp_path / "lake") as lake:
        snap = _snapshot(lake, version, Listed(1, TEXTS))
        assert _by_sentence(lake, snap.name) == {"s0": ["x0"], "s1": ["x1"], "s2": ["x2"]}
        assert verify_lake(lake).ok
