"""A soup recipe run end to end (real Apertium, real DuckLake, the tiny model), and the recipes
a soup refuses before anything runs."""

import json
import re
from pathlib import Path

import pytest
import torch
from rich.console import Console
from safetensors.torch import load_file
from viewmill.pipelines.cli.report import render_summary
from viewmill.pipelines.context import recipe_parameter
from viewmill.pipelines.orchestration.artifacts import soup_markdown
from viewmill.pipelines.recipe import Recipe, RecipeError, load_recipe
from viewmill.pipelines.run import RunContext, run_recipe
from viewmill.pipelines.stages.soup import SoupError, soup_model_id, soup_stage
from viewmill.pipelines.stages.train import TrainResult
from viewmill.pipelines.state import StatePaths
from viewmill.storage.lake import Lake

from tests.conftest import needs_apertium

# keep_best off: each fine-tune exports its last step, so the two differ from the start and each other.
DEV = "  dev: [{name: sts-dev, format: stsb, path: sts.csv}]\n  eval_every: 2\n  keep_best: false\n"


def _soup_recipes(tiny_recipe: Path, soup: str = "soup: {recipes: [other.yaml], shares: [0.5]}") -> Path:
    """soup.yaml (the tiny recipe with dev scoring and `soup`) and other.yaml (another fine-tune
    of the same start: another learning rate and seed) beside the tiny recipe."""
    text = tiny_recipe.read_text(encoding="utf-8")
    with_dev = text.replace("  encoder_lr: 1.0e-3\n", "  encoder_lr: 1.0e-3\n" + DEV)
    other = with_dev.replace("name: tiny", "name: other").replace("encoder_lr: 1.0e-3", "encoder_lr: 3.0e-3\n  seed: 5")
    (tiny_recipe.parent / "other.yaml").write_text(other, encoding="utf-8")
    recipe = tiny_recipe.parent / "soup.yaml"
    recipe.write_text(with_dev.replace("name: tiny", "name: soup") + soup + "\n", encoding="utf-8")
    return recipe


@needs_apertium
def test_a_soup_run_trains_its_ingredients_averages_them_and_evaluates_the_soup(tmp_path, tiny_recipe):
    # Share 0: the other model alone is a candidate, so some mix beats this recipe's model on dev.
    recipe = _soup_recipes(tiny_recipe, "soup: {recipes: [other.yaml], shares: [0.0, 0.5]}")
    state = StatePaths(tmp_path / "state")
    first = run_recipe(RunContext(load_recipe(recipe), state))
    soup = first["soup"]
    own, other = first["train"]["model_id"], next(iter(set(soup["weights"]) - {first["train"]["model_id"]}))
    assert [c["weights"][own] for c in soup["candidates"]] == [1.0, 0.0, 0.5]
    chosen = soup["weights"][own]
    assert soup["exported"] and chosen < 1.0, soup["candidates"]

    # The exported weights are the chosen mix of the two models' own files.
    with Lake(state.lake, read_only=True) as lake:
        rows = lake.arrow("SELECT model_id, path FROM models").to_pylist()
        folders = {row["model_id"]: state.model_folder(row["path"]) for row in rows}
        trained = lake.arrow("SELECT model FROM evals WHERE model = ?", [soup["model_id"]]).num_rows
        runs = lake.arrow("SELECT recipe, status FROM runs ORDER BY started_at").to_pylist()
    assert set(folders) == {own, other, soup["model_id"]}, "both fine-tunes and the soup are recorded in models"
    assert trained >= 1, "the evaluate stage scored the soup, not its first model"
    assert [(r["recipe"], r["status"]) for r in runs] == [("soup", "succeeded"), ("other", "succeeded")]
    weights = [load_file(Path(folders[m]) / "model.safetensors") for m in (own, other, soup["model_id"])]
    for name, tensor in weights[2].items():
        if tensor.is_floating_point():
            expected = chosen * weights[0][name].float() + (1 - chosen) * weights[1][name].float()
            assert torch.allclose(tensor.float(), expected.to(tensor.dtype).float()), name
    manifest = json.loads((Path(soup["path"]) / "viewmill.json").read_text())
    assert manifest["soup"]["weights"] == soup["weights"] and manifest["model_id"] == soup["model_id"]
    assert "A model soup" in (Path(soup["path"]) / "README.md").read_text()

    console = Console(record=True, width=300)
    render_summary(first, console)
    shown = console.export_text()
    assert f"soup {soup['path']}: made in this run" in shown and "candidate mixes on dev" in shown
    assert "soup_recipes" in first["timings"] and "soup" in first["timings"]
    markdown = soup_markdown(soup)
    assert markdown.count("| allowed |") + markdown.count("| refused |") == 3

    again = run_recipe(RunContext(load_recipe(recipe), state))
    assert again["soup"]["reused"] and again["soup"]["model_id"] == soup["model_id"] and again["train"]["reused"]


def _other_start(text: str) -> str:
    return re.sub(r"  encoder: .*", "  encoder: embedded:all-MiniLM-L6-v2", text)


@pytest.mark.parametrize(
    ("soup", "other", "message"),
    [
        (
            "soup: {recipes: [other.yaml]}",
            lambda t: t.replace("train:", "soup: {recipes: [x.yaml]}\ntrain:"),
            "itself a soup",
        ),
        ("soup: {recipes: [other.yaml]}", lambda t: t[: t.index("train:")], "trains nothing"),
        ("soup: {recipes: [other.yaml]}", _other_start, "a soup averages fine-tunes of one start"),
        ("soup: {recipes: [missing.yaml]}", None, "missing.yaml"),
        ("soup: {recipes: [other.yaml], shares: [0.5, 0.5]}", None, "share twice"),
    ],
)
def test_a_soup_that_cannot_be_made_is_refused_when_the_recipe_loads(tiny_recipe, soup, other, message):
    recipe = _soup_recipes(tiny_recipe, soup)
    if other is not None:
        path = tiny_recipe.parent / "other.yaml"
        path.write_text(other(path.read_text(encoding="utf-8")), encoding="utf-8")
    with pytest.raises(RecipeError, match=message):
        load_recipe(recipe)


def test_a_soup_needs_dev_tasks_to_choose_its_mix(tiny_recipe):
    recipe = _soup_recipes(tiny_recipe)
    recipe.write_text(recipe.read_text().replace(DEV, ""), encoding="utf-8")
    with pytest.raises(RecipeError, match="needs a train section with train.dev"):
        load_recipe(recipe)


@needs_apertium
def test_the_plan_of_a_soup_counts_each_recipe_it_names_and_the_soups_dev_scorings(tmp_path, tiny_recipe):
    from viewmill.pipelines.plan import plan_recipe

    from viewmill.settings import Settings

    recipe = _soup_recipes(tiny_recipe, "soup: {recipes: [other.yaml], shares: [0.3, 0.5]}")
    state = StatePaths(tmp_path / "state")
    plan = plan_recipe(load_recipe(recipe), state, Settings(state_dir=state.root), sample=20)
    stages = [s.stage for s in plan.stages]
    assert stages == ["preflight", "ingest", "augment", "pair", "train",
                      "other: preflight", "other: ingest", "other: augment", "other: pair", "other: train",
                      "soup", "evaluate"]  # fmt: skip
    soup = plan.stages[-2]
    assert soup.rows == 3 and soup.seconds > 0 and "3 candidate mixes" in soup.note
    assert plan.total.seconds == pytest.approx(sum(s.seconds for s in plan.stages))
    assert not (state.root / "lake").exists(), "a plan writes no lake"


@needs_apertium
def test_where_the_recipes_own_model_wins_alone_it_is_the_runs_model_and_nothing_is_exported(tmp_path, tiny_recipe):
    # The rule refuses any mix below the start on dev; the tiny fine-tunes are all below it.
    soup = "soup: {recipes: [other.yaml], shares: [0.5]}"
    recipe = _soup_recipes(tiny_recipe, soup)
    text = recipe.read_text().replace(
        "  keep_best: false\n", "  keep_best: false\n  selection: {rule: mean-no-regression}\n"
    )
    recipe.write_text(text, encoding="utf-8")
    state = StatePaths(tmp_path / "state")
    first = run_recipe(RunContext(load_recipe(recipe), state))
    soup_result, own = first["soup"], first["train"]
    assert not soup_result["exported"] and soup_result["path"] == own["path"]
    assert soup_result["model_id"] == own["model_id"] and [c["accepted"] for c in soup_result["candidates"]] == [
        True, False]  # fmt: skip
    assert not list(state.models.glob("soup-soup-*/")), "no soup folder: nothing was exported"
    with Lake(state.lake, read_only=True) as lake:
        scored = {row["model"] for row in lake.arrow("SELECT DISTINCT model FROM evals").to_pylist()}
    assert own["model_id"] in scored, "the evaluate stage scored the recipe's own model as the run's"
    again = run_recipe(RunContext(load_recipe(recipe), state))
    assert again["soup"]["reused"] and again["soup"]["candidates"] == soup_result["candidates"]


def test_two_ingredients_that_are_one_model_are_refused(tmp_path, tiny_recipe):
    ctx = RunContext(load_recipe(_soup_recipes(tiny_recipe)), StatePaths(tmp_path / "state"))
    twice = [TrainResult("same", str(tmp_path / "a"), False, 4), TrainResult("same", str(tmp_path / "b"), False, 4)]
    with pytest.raises(SoupError, match="names one model twice"):
        soup_stage(ctx, twice)


def test_the_soup_id_changes_with_the_shares_and_the_models(tiny_recipe):
    recipe = load_recipe(_soup_recipes(tiny_recipe))
    models = [TrainResult("a", "a", False, 4), TrainResult("b", "b", False, 4)]
    base = soup_model_id(recipe.train, recipe.soup, models)
    other_shares = recipe.soup.model_copy(update={"shares": [0.6]})
    assert soup_model_id(recipe.train, other_shares, models) != base
    assert soup_model_id(recipe.train, recipe.soup, [models[0], TrainResult("c", "c", False, 4)]) != base


def test_a_flow_parameter_carries_the_named_recipes_as_loaded(tiny_recipe):
    recipe = load_recipe(_soup_recipes(tiny_recipe))
    again = Recipe.model_validate(recipe_parameter(recipe))
    named = load_recipe(tiny_recipe.parent / "other.yaml")
    assert [r.content_hash() for r in again.soup_recipes()] == [named.content_hash()]


@pytest.mark.parametrize(
    ("soup", "message"),
    [
        ("soup: {recipes: [other.yaml, ./other.yaml]}", "names a recipe twice"),
        ("soup: {recipes: [soup.yaml]}", "names a recipe twice, or this recipe"),
        ("soup: {recipes: [{name: x}]}", "takes recipe files"),
    ],
)
def test_a_recipe_named_twice_itself_or_inline_is_refused(tiny_recipe, soup, message):
    with pytest.raises(RecipeError, match=message):
        load_recipe(_soup_recipes(tiny_recipe, soup))


def test_set_on_a_soup_says_it_does_not_reach_the_named_recipes(tiny_recipe):
    from viewmill.pipelines.cli.run import named_override_note

    recipe = load_recipe(_soup_recipes(tiny_recipe), ["train.steps=3"])
    named = recipe.soup_recipes()[0].name
    note = named_override_note(recipe, ["train.steps=3"])
    assert note == (f"note: --set applies to recipe {recipe.name} only; the recipes it names ({named}) run as "
                    "their files say: set them there")  # fmt: skip
    assert named_override_note(recipe, None) is None and named_override_note(recipe, []) is None
    assert named_override_note(load_recipe(tiny_recipe), ["train.steps=3"]) is None  # names none, nothing to say
