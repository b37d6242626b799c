"""The evaluate stage reuses the dev scores training made of the start (step 0) and of the exported
step where they are the figure it would compute, and scores only the other tasks."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml
from viewmill.pipelines.recipe import TrainSpec, load_recipe
from viewmill.pipelines.run import RunContext, run_recipe
from viewmill.pipelines.stages import evaluate
from viewmill.pipelines.stages.evaluate import task_data_hash
from viewmill.pipelines.stages.evaluate_dev import _start_scores_alike, reusable_dev_scores
from viewmill.pipelines.state import StatePaths
from viewmill.storage.lake import Lake
from viewmill.train.encoder import load_sentence_model
from viewmill.train.evaluation.sts import Embedder, load_stsb, spearman_x100

from tests.conftest import SENTENCES, needs_apertium


def _with_dev_and_another_task(recipe: Path) -> Path:
    """The tiny recipe scoring its STS fixture as its dev task too, and a second STS file (the
    fixture's gold reversed) that only the evaluate stage scores."""
    raw = yaml.safe_load(recipe.read_text(encoding="utf-8"))
    lines = (recipe.parent / "sts.csv").read_text(encoding="utf-8").splitlines()
    scores = [line.split("\t")[4] for line in lines][::-1]
    cells = [line.split("\t") for line in lines]
    other = ["\t".join([*row[:4], score, *row[5:]]) for row, score in zip(cells, scores, strict=True)]
    (recipe.parent / "other.csv").write_text("\n".join(other) + "\n", encoding="utf-8")
    raw["train"].update(eval_every=2, dev={"name": "dev-fixture", "format": "stsb", "path": "sts.csv"})
    raw["evaluate"]["tasks"].append({"name": "other", "format": "stsb", "path": "other.csv"})
    recipe.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return recipe


@needs_apertium
def test_the_dev_scores_of_start_and_export_are_stored_without_a_second_pass(
    tmp_path, tiny_recipe, tiny_model, monkeypatch, caplog
):
    recipe = _with_dev_and_another_task(tiny_recipe)
    scored = []
    real_score = evaluate._score
    monkeypatch.setattr(evaluate, "_score", lambda target, todo, *a, **kw: scored.append(
        (target.label, [task.name for task in todo])) or real_score(target, todo, *a, **kw))  # fmt: skip
    state = StatePaths(tmp_path / "state")
    with caplog.at_level(logging.INFO, logger=evaluate.__name__):
        summary = run_recipe(RunContext(load_recipe(recipe), state))
    assert scored == [("untrained", ["other"]), ("trained", ["other"])] or scored == [("untrained", ["other"])], (
        "the dev task is never encoded again"
    )
    assert "sts-fixture from training's dev scores" in caplog.text
    train = summary["train"]
    dev = dict(train["dev_task_evals"]["dev-fixture"])
    with Lake(state.lake, read_only=True) as lake:
        stored = dict(lake.con.execute("SELECT model_label, value FROM evals WHERE task = 'sts-fixture'").fetchall())
    fixture = load_stsb(recipe.parent / "sts.csv")
    fresh_start = spearman_x100(Embedder(load_sentence_model(str(tiny_model))), fixture)
    fresh_export = spearman_x100(Embedder(load_sentence_model(train["path"])), fixture)
    assert stored["untrained"] == dev[0] == pytest.approx(fresh_start, abs=1e-4)
    trained = next(value for label, value in stored.items() if label.startswith("trained"))
    assert trained == pytest.approx(dev[train["selected_step"]], abs=1e-9)
    assert trained == pytest.approx(fresh_export, abs=1e-4)


@pytest.mark.parametrize("setting", [{"precision": "bf16"}, {"eval_every": 0}, {"device": "cuda"}])
def test_scores_from_another_setting_are_not_reused(tmp_path, setting):
    spec = TrainSpec(**{"eval_every": 2, **setting})
    assert reusable_dev_scores(spec, str(tmp_path / "none"), None, [], 64, task_data_hash) == {}


def test_nor_from_another_batch_size(tmp_path):
    assert reusable_dev_scores(TrainSpec(eval_every=2), str(tmp_path / "none"), None, [], 32, task_data_hash) == {}


def test_the_start_is_not_reused_where_training_truncated_a_text(tiny_model):
    texts = [f"{SENTENCES[0]} {SENTENCES[1]}"]  # over 8 tokens: truncated in training, not by the start
    assert _start_scores_alike(TrainSpec(max_length=64), str(tiny_model), str(tiny_model), texts)
    assert not _start_scores_alike(TrainSpec(max_length=8), str(tiny_model), str(tiny_model), texts)


def test_a_model_with_a_module_without_settings_is_never_alike(tiny_model):
    # IS-BERT's CNN is a plain nn.Module: no get_config_dict to compare, so no reuse (and no crash).
    from sentence_transformers import SentenceTransformer
    from viewmill.pipelines.stages.evaluate_dev import _structure
    from viewmill.train.modeling_isbert import ReLUCNN

    model = load_sentence_model(str(tiny_model))
    with_cnn = SentenceTransformer(modules=[model[0], ReLUCNN(model[0].get_word_embedding_dimension(), 4, (1, 3))])
    assert _structure(model) is not None
    assert _structure(with_cnn) is None
