"""Hard negatives through a whole recipe run (SentEval-layout NLI data, identity + entailment
views): NLI contradictions, negatives mined with a tiny encoder, the sentence-transformers
export, and sentence-transformers' own trainer on that export."""

import json
from pathlib import Path

import pyarrow as pa
import pytest
import torch
from typer.testing import CliRunner
from viewmill.pipelines.cli.app import app
from viewmill.pipelines.recipe import RecipeError, load_recipe
from viewmill.pipelines.run import RunContext, run_recipe
from viewmill.pipelines.state import StatePaths
from viewmill.storage.embeddings import embedding_key
from viewmill.storage.lake import Lake
from viewmill.storage.snapshots import read_pairs
from viewmill.train.encoder import encoder_fingerprint

# premise, hypothesis, label: premise 2 has no contradiction, premise 4 no entailment (so no pair)
NLI = [
    ("A man is playing a guitar on the street.", "A man plays a guitar.", "entailment"),
    ("A man is playing a guitar on the street.", "The man is sleeping at home.", "contradiction"),
    ("Two dogs are running through a field.", "Animals are running outside.", "entailment"),
    ("Two dogs are running through a field.", "The dogs are sleeping in a house.", "contradiction"),
    ("A woman is cutting vegetables in the kitchen.", "A woman is cooking food.", "entailment"),
    ("A woman is cutting vegetables in the kitchen.", "The woman is a chef.", "neutral"),
    ("The children are playing football in the park.", "Kids play a game outside.", "entailment"),
    ("The children are playing football in the park.", "The children are in school.", "contradiction"),
    ("The children are playing football in the park.", "Nobody is in the park.", "contradiction"),
    ("A group of people are sitting at a table.", "Everyone is standing up.", "contradiction"),
]
CONTRADICTIONS = {
    NLI[0][0]: {"The man is sleeping at home."},
    NLI[2][0]: {"The dogs are sleeping in a house."},
    NLI[6][0]: {"The children are in school.", "Nobody is in the park."},
}


def _recipe(folder: Path, negatives: str, filters: str = "{}") -> Path:
    for name, column in (("s1", 0), ("s2", 1), ("labels", 2)):
        (folder / f"{name}.train").write_text("\n".join(row[column] for row in NLI) + "\n", encoding="utf-8")
    recipe = folder / "nli.yaml"
    recipe.write_text(
        f"""
name: nli
corpus: {{format: senteval, files: [s1.train, s2.train]}}
augmenters:
  - {{name: premise, method: identity}}
  - {{name: entailed, method: entailment}}
pair: {{view_a: premise, view_b: entailed, negatives: {negatives}}}
filters: {filters}
""",
        encoding="utf-8",
    )
    return recipe


def _run(folder: Path, negatives: str) -> dict:
    return run_recipe(RunContext(load_recipe(_recipe(folder, negatives)), StatePaths(folder / "state")))


def _note(folder: Path, snapshot: str) -> dict:
    with Lake(folder / "state" / "lake", read_only=True) as lake:
        return json.loads(lake.scalar("SELECT negatives FROM snapshots WHERE snapshot = ?", [snapshot]))


def test_nli_contradictions_give_simcse_triplets(tmp_path):
    summary = _run(tmp_path, "{source: nli-contradiction}")
    name = summary["snapshot"]["name"]
    with Lake(tmp_path / "state" / "lake", read_only=True) as lake:
        pairs = read_pairs(lake, name).to_pylist()
    assert {p["text_a"]: p["text_b"] for p in pairs} == {NLI[i][0]: NLI[i][1] for i in (0, 2, 6)}
    assert all(len(p["negatives"]) == 1 and set(p["negatives"]) <= CONTRADICTIONS[p["text_a"]] for p in pairs)
    assert _note(tmp_path, name)["dropped"] == 1, "the woman's premise has no contradiction"
    both = _run(tmp_path, "{source: nli-contradiction, per_anchor: 2}")["snapshot"]
    assert both["n_pairs"] == 1 and _note(tmp_path, both["name"])["dropped"] == 3


def test_nli_negatives_need_nli_data(tmp_path):
    (tmp_path / "c.txt").write_text("one two three\n", encoding="utf-8")
    (tmp_path / "r.yaml").write_text(
        "name: r\ncorpus: {files: [c.txt]}\naugmenters: [{name: a, method: identity}, {name: b, method: identity}]\n"
        "pair: {view_a: a, view_b: b, negatives: {source: nli-contradiction}}\n",
        encoding="utf-8",
    )
    with pytest.raises(RecipeError, match=r"pair.negatives \(nli-contradiction\) needs labelled NLI data.*senteval"):
        load_recipe(tmp_path / "r.yaml")


def test_mined_negatives_are_the_closest_allowed_sentences_and_are_reused(tmp_path, tiny_model, monkeypatch):
    from sentence_transformers import SentenceTransformer

    negatives = f"{{source: mined, encoder: {tiny_model}, per_anchor: 2, candidates: sentences}}"
    recipe = load_recipe(_recipe(tmp_path, negatives))
    summary = run_recipe(RunContext(recipe, StatePaths(tmp_path / "state")))
    name = summary["snapshot"]["name"]
    with Lake(tmp_path / "state" / "lake", read_only=True) as lake:
        pairs = read_pairs(lake, name).to_pylist()
        rows = lake.arrow("SELECT * FROM pair_negatives WHERE snapshot = ? ORDER BY pair_id, rank", [name])
        sentences = sorted({r[0] for r in lake.con.execute("SELECT text FROM sentences").fetchall()})
    assert len(pairs) == 4 and _note(tmp_path, name)["dropped"] == 0
    model = SentenceTransformer(str(tiny_model), device="cpu")
    # What `viewmill plan` scales: every sentence is a candidate, each embedded once; 4 anchors.
    shape = recipe.pair.negatives.last_shape
    dims = model.get_sentence_embedding_dimension()
    assert (shape.texts, shape.candidates, shape.anchors, shape.dims) == (len(sentences), len(sentences), 4, dims)
    vectors = dict(zip(sentences, model.encode(sentences, normalize_embeddings=True, convert_to_tensor=True),
                       strict=True))  # fmt: skip
    scores = {p["pair_id"]: [] for p in pairs}
    for row in rows.to_pylist():
        scores[row["pair_id"]].append(row["score"])
    for pair in pairs:
        allowed = [s for s in sentences if s not in (pair["text_a"], pair["text_b"])]
        cosine = {s: float(torch.dot(vectors[pair["text_a"]], vectors[s])) for s in allowed}
        assert pair["negatives"] == sorted(allowed, key=lambda s: -cosine[s])[:2]
        assert scores[pair["pair_id"]] == pytest.approx([cosine[s] for s in pair["negatives"]], abs=1e-5)
    miner = json.loads(rows["miner"][0].as_py())
    assert miner["encoder"] == str(tiny_model) and miner["fingerprint"] == encoder_fingerprint(str(tiny_model))
    assert (miner["index"], miner["per_anchor"], miner["range_max"]) == ("exact", 2, 2)

    def no_model(*args, **kwargs):
        raise AssertionError("a rerun must find the snapshot without loading the encoder")

    monkeypatch.setattr("viewmill.train.mining.load_sentence_model", no_model)
    again = _run(tmp_path, negatives)["snapshot"]
    assert again["name"] == name and not again["created"]


def test_the_export_trains_with_sentence_transformers_own_trainer(tmp_path, tiny_model):
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    name = _run(tmp_path, "{source: nli-contradiction}")["snapshot"]["name"]
    out = tmp_path / "triplets"
    exported = CliRunner().invoke(app, ["lake", "export", name, str(out), "--layout", "sentence-transformers",
                                        "--format", "hf", "--state-dir", str(tmp_path / "state")])  # fmt: skip
    assert exported.exit_code == 0, exported.output
    dataset = Dataset.load_from_disk(str(out))
    assert dataset.column_names == ["anchor", "positive", "negative"] and dataset.num_rows == 3
    model = SentenceTransformer(str(tiny_model), device="cpu")
    before = [p.detach().clone() for p in model.parameters()]
    args = SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path / "st"), max_steps=2, per_device_train_batch_size=3, learning_rate=1e-3,
        report_to="none", use_cpu=True, save_strategy="no", logging_steps=1, seed=0,
    )  # fmt: skip
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=dataset,
                                         loss=MultipleNegativesRankingLoss(model))  # fmt: skip
    result = trainer.train()
    assert result.global_step == 2 and torch.isfinite(torch.tensor(result.training_loss))
    assert any(not torch.equal(a, b.detach()) for a, b in zip(before, model.parameters(), strict=True))


def test_mining_records_what_it_embedded_and_searched_for_the_plan(tmp_path, tiny_model):
    # `viewmill plan` scales these to the corpus: with `candidates: positives` the anchors (the
    # premises) are embedded beside the candidates (the entailed hypotheses) but never searched.
    negatives = f"{{source: mined, encoder: {tiny_model}, per_anchor: 1, candidates: positives}}"
    recipe = load_recipe(_recipe(tmp_path, negatives))
    run_recipe(RunContext(recipe, StatePaths(tmp_path / "state")))
    shape = recipe.pair.negatives.last_shape
    premises = {NLI[i][0] for i in (0, 2, 4, 6)}
    entailed = {NLI[i][1] for i in (0, 2, 4, 6)}
    assert (shape.texts, shape.candidates, shape.anchors) == (len(premises | entailed), len(entailed), 4)
    assert shape.text_chars == pytest.approx(sum(map(len, premises | entailed)) / len(premises | entailed))


def _no_model(*args, **kwargs):
    raise AssertionError("mining found every text in the lake's embedding store: it must not load the encoder")


def test_mining_reads_the_meaning_filter_s_embeddings_from_the_lake(tmp_path, tiny_model, monkeypatch):
    negatives = f"{{source: mined, encoder: {tiny_model}, per_anchor: 1, candidates: positives}}"
    meaning = f"{{meaning: {{encoder: {tiny_model}, min_cosine: -1, max_cosine: 1}}}}"
    monkeypatch.setattr("viewmill.train.mining.load_sentence_model", _no_model)
    summary = run_recipe(RunContext(load_recipe(_recipe(tmp_path, negatives, meaning)), StatePaths(tmp_path / "state")))
    monkeypatch.undo()
    with Lake(tmp_path / "state" / "lake", read_only=True) as lake:
        stored = set(lake.arrow("SELECT text_hash FROM embeddings")["text_hash"].to_pylist())
        mined = read_pairs(lake, summary["snapshot"]["name"]).to_pylist()
    assert mined and all(len(p["negatives"]) == 1 for p in mined)
    assert {embedding_key(t) for p in mined for t in (p["text_a"], p["text_b"])} <= stored
    # The same negatives as a miner that embeds every text itself, in its own batches.
    alone = tmp_path / "alone"
    alone.mkdir()
    plain = f"{{source: mined, encoder: {tiny_model}, per_anchor: 1, candidates: positives, store: false}}"
    again = run_recipe(RunContext(load_recipe(_recipe(alone, plain, meaning)), StatePaths(alone / "state")))
    with Lake(alone / "state" / "lake", read_only=True) as lake:
        assert lake.scalar("SELECT count(*) FROM embeddings") == 0  # nothing stored: the filter kept its own
        by_itself = read_pairs(lake, again["snapshot"]["name"]).to_pylist()
    assert {p["text_a"]: p["negatives"] for p in by_itself} == {p["text_a"]: p["negatives"] for p in mined}


def test_a_rerun_with_other_mining_controls_embeds_nothing_new(tmp_path, tiny_model, monkeypatch):
    first = f"{{source: mined, encoder: {tiny_model}, per_anchor: 1, candidates: sentences}}"
    name = _run(tmp_path, first)["snapshot"]["name"]
    monkeypatch.setattr("viewmill.train.mining.load_sentence_model", _no_model)
    wider = _run(tmp_path, first.replace("per_anchor: 1", "per_anchor: 2"))["snapshot"]
    assert wider["created"] and wider["name"] != name
    with Lake(tmp_path / "state" / "lake", read_only=True) as lake:
        assert all(len(p["negatives"]) == 2 for p in read_pairs(lake, wider["name"]).to_pylist())


def test_an_edited_stored_embedding_is_refused_before_mining_uses_it(tmp_path, tiny_model):
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from viewmill.storage.lake import LakeError

    first = f"{{source: mined, encoder: {tiny_model}, per_anchor: 1, candidates: sentences}}"
    _run(tmp_path, first)
    [stored] = sorted((tmp_path / "state" / "lake" / "data" / "main" / "embeddings").rglob("*.parquet"))
    table = pq.read_table(stored)
    vectors = pc.list_flatten(table["vector"]).to_numpy().copy()
    vectors[0] = -vectors[0]  # finite and of the right width: only the file's hash can tell
    width = len(vectors) // table.num_rows
    edited = pa.ListArray.from_arrays(pa.array(range(0, len(vectors) + 1, width), pa.int32()), pa.array(vectors))
    pq.write_table(table.set_column(table.column_names.index("vector"), "vector", edited), stored)
    with pytest.raises(LakeError, match="cannot pair the views.*embeddings data file.*changed since viewmill wrote it"):
        _run(tmp_path, first.replace("per_anchor: 1", "per_anchor: 2"))
