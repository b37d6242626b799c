import pytest
from viewmill.augment.augmenters import Entailment
from viewmill.augment.ingest.corpus import ingest
from viewmill.augment.quality import FilterSpec
from viewmill.storage.lake import Lake

from tests.views import make_views

PREMISES = ["A man plays a guitar .", "A man plays a guitar .", "A man plays a guitar .", "Kids run .", "A cat ."]
HYPOTHESES = ["A person makes music .", "A man is asleep .", "Someone plays an instrument .", "Kids move .", "X ."]
LABELS = ["entailment", "contradiction", "entailment", "neutral", "entailment"]


def _nli_lake(tmp_path, labels=LABELS) -> Lake:
    for name, lines in (("s1", PREMISES), ("s2", HYPOTHESES), ("labels", labels)):
        (tmp_path / f"{name}.dev").write_text(" \n".join(lines) + "\n", encoding="utf-8")
    result = ingest(
        [tmp_path / "s1.dev", tmp_path / "s2.dev"], corpus="nli", fmt="senteval", lang="en", detokenize=True,
        min_words=2, max_words=20, limit=None, run_id="r", nli_links=True,
    )  # fmt: skip
    lake = Lake(tmp_path / "lake")
    lake.append("sentences", result.sentences, unique_on=("corpus", "sentence_id"))
    lake.append("nli_pairs", result.nli_pairs, unique_on=("corpus", "pair_id"))
    return lake


def _views(lake, spec):
    report = make_views(lake, "nli", spec, FilterSpec(min_chrf=90), run_id="r")
    rows = lake.arrow(
        "SELECT s.text AS source, v.text, v.status, v.reject_reason, v.lang FROM views v "
        "JOIN sentences s USING (sentence_id) WHERE v.config_hash = ? ORDER BY s.text",
        [report.config_hash],
    ).to_pylist()
    return report, {r["source"]: r for r in rows}


def test_premises_get_an_entailed_hypothesis_and_others_a_recorded_rejection(tmp_path):
    lake = _nli_lake(tmp_path)
    report, views = _views(lake, Entailment(name="nli"))
    guitar = views["A man plays a guitar."]
    assert guitar["text"] in {"A person makes music.", "Someone plays an instrument."}, "never the contradiction"
    assert guitar["status"] == "kept", "quality filters (min_chrf 90 here) do not apply to human hypotheses"
    assert guitar["lang"] == "en"
    assert views["Kids run."]["reject_reason"] == "no_entailment_pair", "neutral is not a positive"
    assert views["A person makes music."]["reject_reason"] == "no_entailment_pair", "hypotheses are no premises"
    assert views["A cat."]["text"] == "X.", "a hypothesis need not be a corpus sentence itself"
    assert report.kept == 2 and report.rejected == report.sentences - 2
    again, second = _views(lake, Entailment(name="nli"))
    assert again.new_views == 0 and second == views, "the choice among hypotheses is stable"
    neutral_too = _views(lake, Entailment(name="nli2", labels=["entailment", "neutral"]))[1]
    assert neutral_too["Kids run."]["text"] == "Kids move."


def test_new_links_make_a_new_configuration(tmp_path):
    lake = _nli_lake(tmp_path)
    first, _ = _views(lake, Entailment(name="nli"))
    extra = ingest(
        [tmp_path / "s1.dev"], corpus="other", fmt="senteval", lang="en", detokenize=False, min_words=1,
        max_words=20, limit=None, run_id="r2", nli_links=True,
    )  # fmt: skip
    lake.append("nli_pairs", extra.nli_pairs, unique_on=("corpus", "pair_id"))
    second, _ = _views(lake, Entailment(name="nli"))
    assert second.config_hash != first.config_hash


def test_an_entailment_recipe_needs_nli_data(tmp_path):
    from viewmill.pipelines.recipe import RecipeError, load_recipe

    (tmp_path / "a.txt").write_text("one two three\n", encoding="utf-8")
    (tmp_path / "r.yaml").write_text(
        "name: r\ncorpus: {files: [a.txt]}\naugmenters: [{name: id, method: identity}, {name: nli, method: "
        "entailment}]\npair: {view_a: id, view_b: nli}\n",
        encoding="utf-8",
    )
    with pytest.raises(RecipeError, match="entailment augmenter needs labelled NLI data.*senteval"):
        load_recipe(tmp_path / "r.yaml")
