"""Model selection on several dev tasks through the recipe: `train.dev` as one task or a weighted
list, `train.selection`, the model id covering them, the per-task records a run leaves (report,
manifest, card, the lake's `models`, the training artifact) and sweeps selecting on several tasks."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml
from viewmill.pipelines.orchestration import artifacts
from viewmill.pipelines.recipe import DevTask, RecipeError, load_recipe
from viewmill.pipelines.run import RunContext, run_recipe
from viewmill.pipelines.stages.train import dev_scorer, model_id_for
from viewmill.pipelines.state import StatePaths
from viewmill.pipelines.sweep import run_sweep
from viewmill.storage.lake import Lake
from viewmill.train.encoder import load_sentence_model
from viewmill.train.evaluation.sts import EvalDataError, concatenated, load_task, model_spearman_x100

from tests.conftest import needs_apertium, write_sts_fixture

STSB_DEV = {"name": "sts-dev", "format": "stsb", "path": "dev/sts-dev.csv"}
EN_EN = {"name": "en-en", "format": "stsb-xling", "path": "dev/multi", "lang_a": "en", "lang_b": "en", "split": "dev"}


def _dev_files(folder: Path) -> None:
    """An STS-B dev file and an stsb-multi-mt folder (English, the same pairs with the gold reversed)."""
    (folder / "dev" / "multi").mkdir(parents=True)
    sts = write_sts_fixture(folder / "dev" / "sts-dev.csv")
    rows = [line.split("\t") for line in sts.read_text(encoding="utf-8").splitlines()]
    scores = [row[4] for row in rows][::-1]
    with (folder / "dev" / "multi" / "stsb-en-dev.csv").open("w", encoding="utf-8", newline="") as f:
        csv.writer(f).writerows((row[5], row[6], score) for row, score in zip(rows, scores, strict=True))


def _recipe(recipe: Path, **train) -> Path:
    raw = yaml.safe_load(recipe.read_text(encoding="utf-8"))
    raw["train"].update(train)
    _dev_files(recipe.parent)
    recipe.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return recipe


def test_dev_is_one_task_as_before_or_a_weighted_list(tmp_path, tiny_recipe):
    one = load_recipe(_recipe(tiny_recipe, dev=STSB_DEV)).train
    assert isinstance(one.dev, DevTask) and one.dev_tasks == [one.dev] and one.dev.weight == 1.0
    assert one.model_dump(mode="json")["dev"]["name"] == "sts-dev", "one task keeps its manifest shape"
    assert one.eval_every == 4 and one.selection.rule == "mean"
    dev = "train.dev=" + json.dumps([STSB_DEV, {**EN_EN, "weight": 3}])
    several = load_recipe(tiny_recipe, [dev, "train.selection={rule: mean-no-regression, tolerance: 0.5}"]).train
    assert [(t.name, t.weight) for t in several.dev_tasks] == [("sts-dev", 1.0), ("en-en", 3.0)]
    assert (several.selection.rule, several.selection.tolerance) == ("mean-no-regression", 0.5)
    assert several.dev_tasks[1].path == tiny_recipe.parent / "dev" / "multi", "paths from the recipe's folder"
    assert several.eval_every == 4, "dev evaluation turns on for a list too"


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (["train.dev=" + json.dumps([STSB_DEV, STSB_DEV])], "dev task names must be unique"),
        (["train.dev=[]"], "dev is an empty list"),
        (["train.dev=" + json.dumps({**STSB_DEV, "weight": 0})], "greater than 0"),
        (["train.selection={rule: mean-no-regression}"], "selection chooses among dev evaluations: set train.dev"),
        (["train.dev=" + json.dumps(STSB_DEV), "train.selection={tolerance: 1}"], "tolerance applies to rule"),
    ],
)
def test_bad_dev_settings_are_refused_with_the_fix(tiny_recipe, settings, message):
    with pytest.raises(RecipeError, match=message):
        load_recipe(tiny_recipe, settings)


def test_the_model_id_covers_every_dev_file_weight_and_the_rule(tmp_path, tiny_recipe):
    recipe = _recipe(tiny_recipe)

    def model_id(*settings: str) -> str:
        dev = "train.dev=" + json.dumps([STSB_DEV, EN_EN])
        return model_id_for(load_recipe(recipe, [dev, *settings]).train, "pairs-hash")

    base = model_id()
    assert model_id() == base
    changed = {
        "weight": model_id("train.dev=" + json.dumps([STSB_DEV, {**EN_EN, "weight": 2}])),
        "rule": model_id("train.selection={rule: mean-no-regression}"),
        "tolerance": model_id("train.selection={rule: mean-no-regression, tolerance: 1}"),
        "one task fewer": model_id("train.dev=" + json.dumps([STSB_DEV])),
        "a renamed task": model_id("train.dev=" + json.dumps([STSB_DEV, {**EN_EN, "name": "other"}])),
    }
    assert len({base, *changed.values()}) == len(changed) + 1, changed
    multi = recipe.parent / "dev" / "multi" / "stsb-en-dev.csv"
    multi.write_text(multi.read_text(encoding="utf-8").replace(",5.0", ",4.9"), encoding="utf-8")
    assert model_id() != base, "the bytes of the second dev task's files"


def test_the_model_id_covers_the_precision_auto_resolves_to(tiny_recipe, monkeypatch):
    recipe = _recipe(tiny_recipe)

    def model_id(pinned: str, *settings: str) -> str:
        monkeypatch.setenv("VIEWMILL_AUTO_PRECISION", pinned)
        return model_id_for(load_recipe(recipe, list(settings)).train, "pairs-hash")

    # A bf16 model is not reused where fp32 would run; auto and the precision it resolves to are one model.
    assert model_id("fp32") != model_id("bf16")
    assert model_id("bf16") == model_id("fp32", "train.precision=bf16")
    assert model_id("fp32") == model_id("bf16", "train.precision=fp32")


def test_the_dev_scorer_gives_each_task_and_their_weighted_mean(tmp_path, tiny_recipe, tiny_model):
    dev = "train.dev=" + json.dumps([STSB_DEV, {**EN_EN, "weight": 3}])
    tasks = load_recipe(_recipe(tiny_recipe), [dev]).train.dev_tasks
    model = load_sentence_model(str(tiny_model))
    result = dev_scorer(tasks)(model)
    alone = {t.name: model_spearman_x100(model, concatenated(load_task(t))) for t in tasks}
    assert result.scores == pytest.approx(alone, abs=1e-6)
    assert result.score == pytest.approx((alone["sts-dev"] + 3 * alone["en-en"]) / 4)
    assert alone["sts-dev"] != pytest.approx(alone["en-en"]), "the fixture's two tasks differ"
    assert dev_scorer([]) is None


def test_a_dev_task_that_cannot_be_scored_is_refused(tmp_path):
    track = tmp_path / "sts17"
    track.mkdir()
    (track / "STS.input.track6.tr-en.txt").write_text("a\tb\nc\td\n", encoding="utf-8")
    (track / "STS.gs.track6.tr-en.txt").write_text("1\n", encoding="utf-8")
    task = DevTask(name="tr-en", format="sts17", track="tr-en", path=track)
    with pytest.raises(EvalDataError, match="dev task tr-en cannot be scored: .* choose another dev task"):
        dev_scorer([task])


def test_the_training_artifact_shows_each_dev_task(tmp_path):
    train = {"model_id": "m" * 16, "path": "/m", "reused": False, "selected_step": 2, "steps": 4, "pairs": 9,
             "first_loss": 1.0, "last_loss": 0.5, "seconds": 1.0, "dev_evals": [(0, 50.0), (2, 52.5)],
             "dev_task_evals": {"sts-dev": [(0, 60.0), (2, 58.0)], "en-en": [(0, 40.0), (2, 47.0)]}}  # fmt: skip
    table = artifacts.training_markdown(train, None)
    assert "| step | sts-dev | en-en | selection score |" in table
    assert "| 0 | 60.00 | 40.00 | 50.00 |" in table and "| 2 | 58.00 | 47.00 | 52.50 |" in table


def _fake_run(figures: dict[float, dict[str, float]]):
    """A recipe run that trains nothing: each configuration's figures by its encoder_lr."""

    def run(ctx: RunContext) -> dict:
        lr = ctx.recipe.train.encoder_lr
        evals = [{"model": "trained", "task": t, "value": v} for t, v in figures[lr].items()]
        evals += [{"model": "untrained", "task": t, "value": 50.0} for t in figures[lr]]
        return {"evals": evals, "snapshot": {"name": "tiny@1"}, "train": {"model_id": f"model-{lr}"}}

    return run


def test_a_sweep_selects_on_the_weighted_mean_of_several_tasks(tmp_path, tiny_recipe):
    raw = yaml.safe_load(tiny_recipe.read_text(encoding="utf-8"))
    raw["evaluate"]["tasks"] += [{"name": "dev-a", "format": "stsb", "path": "sts.csv"},
                                 {"name": "dev-b", "format": "stsb", "path": "sts.csv"}]  # fmt: skip
    figures = {1e-3: {"sts-fixture": 70.0, "dev-a": 80.0, "dev-b": 40.0},  # dev-a alone, or mean: 60
               1e-4: {"sts-fixture": 71.0, "dev-a": 70.0, "dev-b": 60.0},  # mean 65; weighted (1, 3) 62.5
               1e-5: {"sts-fixture": 72.0, "dev-a": 55.0, "dev-b": 70.0}}  # weighted (1, 3) 66.25  # fmt: skip

    def sweep(select_on) -> tuple:
        raw["sweep"] = {"select_on": select_on, "grid": {"train.encoder_lr": list(figures)}}
        tiny_recipe.write_text(yaml.safe_dump(raw), encoding="utf-8")
        report = run_sweep(tiny_recipe, StatePaths(tmp_path / "state"), run=_fake_run(figures))
        return report.selected.label, report

    assert sweep("dev-a")[0] == "encoder_lr=0.001"
    assert sweep(["dev-a"])[0] == "encoder_lr=0.001"
    label, report = sweep(["dev-a", "dev-b"])
    assert label == "encoder_lr=0.0001" and report.select_on == "mean(dev-a, dev-b)"
    table = report.markdown.splitlines()
    assert table[0].startswith("| configuration | settings | dev-a | dev-b | mean(dev-a, dev-b) (selects) |")
    assert "| 80.00 | 40.00 | 60.00 | 70.00 |" in table[3], "each selection task, their mean, then the others"
    label, report = sweep({"dev-a": 1, "dev-b": 3})
    assert label == "encoder_lr=1e-05" and report.select_on == "weighted mean(dev-a: 1, dev-b: 3)"
    with Lake(tmp_path / "state" / "lake", read_only=True) as lake:
        rows = lake.arrow(
            "SELECT label, select_task, select_value, selected FROM sweeps WHERE sweep_run = ?", [report.sweep_run]
        ).to_pylist()
    assert {r["label"]: r["select_value"] for r in rows} == pytest.approx(
        {"encoder_lr=0.001": 50.0, "encoder_lr=0.0001": 62.5, "encoder_lr=1e-05": 66.25}
    )
    assert {r["select_task"] for r in rows} == {"weighted mean(dev-a: 1, dev-b: 3)"}
    with pytest.raises(RecipeError, match="select_on 'nope' must name an evaluate task"):
        sweep(["dev-a", "nope"])
    with pytest.raises(RecipeError, match="select_on names a task twice"):
        sweep(["dev-a", "dev-a"])


@needs_apertium
def test_a_run_selects_on_several_dev_tasks_and_records_each_trajectory(tmp_path, tiny_recipe):
    dev = [STSB_DEV, {**EN_EN, "weight": 2}]
    recipe = _recipe(tiny_recipe, dev=dev, eval_every=2, selection={"rule": "mean-no-regression", "tolerance": 0.5})
    state = StatePaths(tmp_path / "state")
    summary = run_recipe(RunContext(load_recipe(recipe), state))
    train = summary["train"]
    per_task = train["dev_task_evals"]
    assert {task: [step for step, _ in evals] for task, evals in per_task.items()} == {
        "sts-dev": [0, 2, 4], "en-en": [0, 2, 4]
    }  # fmt: skip
    scores = {task: dict(evals) for task, evals in per_task.items()}
    for step, score in train["dev_evals"]:
        assert score == pytest.approx((scores["sts-dev"][step] + 2 * scores["en-en"][step]) / 3)
    accepted = [s for s, _ in train["dev_evals"] if all(scores[t][s] >= scores[t][0] - 0.5 for t in scores)]
    assert train["selected_step"] == max(accepted, key=dict(train["dev_evals"]).get), "brute-force rule"

    model = Path(train["path"])
    manifest = json.loads((model / "viewmill.json").read_text(encoding="utf-8"))
    assert manifest["report"]["dev_task_evals"] == json.loads(json.dumps(per_task))
    assert manifest["dev_task"] == "sts-dev, en-en" and manifest["train_config"]["selection"]["tolerance"] == 0.5
    card = (model / "README.md").read_text(encoding="utf-8")
    assert "| sts-dev (model selection) | mteb/stsbenchmark-sts | validation |" in card, "named like STS-B dev"
    assert "| en-en (model selection) | PhilipMay/stsb_multi_mt | dev |" in card
    assert "weighted mean of the dev tasks with no task below its start by more than 0.5" in card
    with Lake(state.lake, read_only=True) as lake:
        recorded = json.loads(lake.scalar("SELECT train_config FROM models WHERE model_id = ?", [train["model_id"]]))
    assert recorded["report"]["dev_task_evals"] == manifest["report"]["dev_task_evals"], "the lake's lineage"
    again = run_recipe(RunContext(load_recipe(recipe), state))
    assert again["train"]["reused"] and again["train"]["model_id"] == train["model_id"]


def test_the_documented_dev_tasks_are_a_valid_train_section():
    from viewmill.pipelines.recipe import TrainSpec

    from tests.conftest import REPO
    from tests.test_readme import readme_blocks

    doc = (REPO / "docs" / "training.md").read_text(encoding="utf-8")
    section = doc[doc.index("## Choosing the exported model on several dev tasks") :]
    block = next(b for b in readme_blocks(section) if b.lang == "yaml")
    spec = TrainSpec.model_validate(yaml.safe_load(block.text)["train"])
    assert [(t.name, t.lang_a, t.lang_b, t.weight) for t in spec.dev_tasks][1:3] == [
        ("stsb-pt-dev", "pt", "pt", 1.0), ("stsb-en-pt-dev", "en", "pt", 2.0)
    ]  # fmt: skip
    assert spec.selection.rule == "mean-no-regression" and spec.eval_every == 20
