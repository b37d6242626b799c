"""A schedule in stages (`train.start_from`) run end to end (real Apertium, real DuckLake, the
tiny model), and the start recipes refused before anything runs."""

import re
from pathlib import Path

import pytest
from viewmill.pipelines.context import recipe_parameter
from viewmill.pipelines.recipe import Recipe, RecipeError, load_recipe
from viewmill.pipelines.run import RunContext, run_recipe
from viewmill.pipelines.state import StatePaths
from viewmill.storage.lake import Lake
from viewmill.train.manifest import read_manifest

from tests.conftest import needs_apertium

# fp32 with the evaluate task among the dev tasks: where training began at the encoder, the
# evaluate stage may reuse step 0's dev score as the start's. keep_best off: each stage exports
# its last step, so the two models differ from the start and from each other.
DEV = "  dev: [{name: sts-dev, format: stsb, path: sts.csv}]\n  eval_every: 2\n  keep_best: false\n  precision: fp32\n"


def _schedule(tiny_recipe: Path, start: str = "first.yaml") -> Path:
    """first.yaml (the tiny recipe with dev scoring) and second.yaml (continues first's model at
    another learning rate) beside the tiny recipe; returns second.yaml."""
    text = tiny_recipe.read_text(encoding="utf-8").replace("  encoder_lr: 1.0e-3\n", "  encoder_lr: 1.0e-3\n" + DEV)
    (tiny_recipe.parent / "first.yaml").write_text(text.replace("name: tiny", "name: first"), encoding="utf-8")
    second = text.replace("name: tiny", "name: second").replace("encoder_lr: 1.0e-3", "encoder_lr: 3.0e-3")
    recipe = tiny_recipe.parent / "second.yaml"
    recipe.write_text(second.replace("train:\n", f"train:\n  start_from: {start}\n"), encoding="utf-8")
    return recipe


def _dev_scores(folder: Path) -> tuple[dict[int, float], int]:
    manifest = read_manifest(folder)
    return dict(map(tuple, manifest["report"]["dev_task_evals"]["sts-dev"])), manifest["selected_step"]


@needs_apertium
def test_a_schedule_trains_its_start_first_and_continues_from_that_model(tmp_path, tiny_recipe):
    recipe = _schedule(tiny_recipe)
    state = StatePaths(tmp_path / "state")
    summary = run_recipe(RunContext(load_recipe(recipe), state))
    second = summary["train"]
    with Lake(state.lake, read_only=True) as lake:
        models = {r["model_id"]: r for r in lake.arrow("SELECT model_id, path, base_model FROM models").to_pylist()}
        runs = lake.arrow("SELECT recipe, status FROM runs ORDER BY started_at").to_pylist()
        query = "SELECT DISTINCT model, model_label, value FROM evals WHERE task = 'sts-fixture'"
        scored = lake.arrow(query).to_pylist()
    assert [(r["recipe"], r["status"]) for r in runs] == [("second", "succeeded"), ("first", "succeeded")]
    (first_id,) = set(models) - {second["model_id"]}
    first_folder = state.model_folder(models[first_id]["path"])
    assert models[second["model_id"]]["base_model"] == str(first_folder), "its lineage names the model it continued"
    assert read_manifest(Path(second["path"]))["train_config"]["start_from"] == "first"

    # Step 0 of the second stage is the first stage's exported model, not the encoder.
    first_dev, first_step = _dev_scores(first_folder)
    second_dev, _ = _dev_scores(Path(second["path"]))
    assert second_dev[0] == pytest.approx(first_dev[first_step], abs=1e-6)
    assert abs(second_dev[0] - first_dev[0]) > 1e-4, "the two stages start from different weights"

    # The baseline is the schedule's start (the encoder), scored as such: never step 0's dev score.
    by_label = {row["model_label"]: row for row in scored}
    assert set(by_label) == {"untrained", "trained"} and by_label["trained"]["model"] == second["model_id"]
    assert by_label["untrained"]["model"] not in models, "the baseline is neither stage's model"
    start_value = by_label["untrained"]["value"]
    assert start_value == pytest.approx(first_dev[0], abs=1e-4) and start_value != pytest.approx(second_dev[0])

    again = run_recipe(RunContext(load_recipe(recipe), state))
    assert again["train"]["reused"] and again["train"]["model_id"] == second["model_id"]
    assert "start_from" in summary["timings"]

    # Another first stage is another start: the second stage's model is another model.
    first = tiny_recipe.parent / "first.yaml"
    first.write_text(first.read_text().replace("encoder_lr: 1.0e-3", "encoder_lr: 2.0e-3"), encoding="utf-8")
    moved = run_recipe(RunContext(load_recipe(recipe), state), evaluate=False)
    assert not moved["train"]["reused"] and moved["train"]["model_id"] != second["model_id"]


def _other_start(text: str) -> str:
    return re.sub(r"  encoder: .*", "  encoder: embedded:all-MiniLM-L6-v2", text)


@pytest.mark.parametrize(
    ("start", "first", "message"),
    [
        ("second.yaml", None, "names it back"),
        ("first.yaml", lambda t: t.replace("train:\n", "train:\n  start_from: second.yaml\n"), "names it back"),
        ("first.yaml", lambda t: t.replace("train:", "soup: {recipes: [x.yaml]}\ntrain:"), "a soup"),
        ("first.yaml", lambda t: t.replace("train:", "sweep: {}\ntrain:"), "a sweep"),
        ("first.yaml", lambda t: t[: t.index("train:")], "trains nothing"),
        ("first.yaml", _other_start, "share one start"),
        ("missing.yaml", None, "missing.yaml"),
        ("{name: x}", None, "takes a recipe file"),
    ],
)
def test_a_start_that_cannot_begin_the_schedule_is_refused_when_the_recipe_loads(tiny_recipe, start, first, message):
    recipe = _schedule(tiny_recipe, start)
    if first is not None:
        path = tiny_recipe.parent / "first.yaml"
        path.write_text(first(path.read_text(encoding="utf-8")), encoding="utf-8")
    with pytest.raises(RecipeError, match=message):
        load_recipe(recipe)


def test_a_flow_parameter_carries_the_start_as_loaded_and_set_says_it_does_not_reach_it(tiny_recipe):
    from viewmill.pipelines.cli.run import named_override_note

    recipe = load_recipe(_schedule(tiny_recipe))
    again = Recipe.model_validate(recipe_parameter(recipe))
    assert again.start_recipe().content_hash() == load_recipe(tiny_recipe.parent / "first.yaml").content_hash()
    assert [r.name for r in again.named_recipes()] == ["first"]
    note = named_override_note(recipe, ["train.steps=3"])
    assert note is not None and "recipes it names (first)" in note


@needs_apertium
def test_the_plan_of_a_schedule_counts_its_start_before_its_training(tmp_path, tiny_recipe):
    from viewmill.pipelines.plan import plan_recipe

    from viewmill.settings import Settings

    state = StatePaths(tmp_path / "state")
    plan = plan_recipe(load_recipe(_schedule(tiny_recipe)), state, Settings(state_dir=state.root), sample=20)
    assert [s.stage for s in plan.stages] == [
        "preflight", "ingest", "augment", "pair",
        "first: preflight", "first: ingest", "first: augment", "first: pair", "first: train",
        "train", "evaluate",
    ]  # fmt: skip
    assert not (state.root / "lake").exists(), "a plan writes no lake"
