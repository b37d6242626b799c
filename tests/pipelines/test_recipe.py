import re
import subprocess
import sys
from pathlib import Path

import pytest
from viewmill.pipelines.recipe import RecipeError, load_recipe

from tests.conftest import REPO

DEMO = Path(__file__).resolve().parents[2] / "recipes" / "demo.yaml"


def test_demo_recipe_is_valid_and_its_paths_resolve():
    recipe = load_recipe(DEMO)
    assert [a.path_label for a in recipe.augmenters[2:]] == ["en>es>en", "en>ca>en"]
    assert all(f.is_file() for f in recipe.corpus.files)
    assert all(t.path.is_file() for t in recipe.evaluate.tasks)
    assert recipe.train.encoder == "embedded:all-MiniLM-L6-v2"


# Loads recipes with train sections (and every built-in objective's defaults), then names torch if it came in.
WITHOUT_TORCH = """
import sys
from viewmill.pipelines.recipe import load_recipe
from viewmill.train.config import OBJECTIVES, TrainConfig
load_recipe("recipes/demo.yaml")
load_recipe("recipes/combined.yaml")
for name in OBJECTIVES.builtin_names():
    TrainConfig(objective=name)
print("torch" in sys.modules)
"""


def test_validating_a_recipes_train_section_does_not_import_torch():
    # every `viewmill` command that reads a recipe would pay ~1 s for torch before doing anything
    done = subprocess.run([sys.executable, "-c", WITHOUT_TORCH], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def _write(tmp_path, text):
    path = tmp_path / "r.yaml"
    path.write_text(text, encoding="utf-8")
    return path


BASE = """
name: r
corpus: {files: [c.txt]}
augmenters: [{name: a, path: [en, es, en]}, {name: b, path: [en, ca, en]}]
pair: {view_a: a, view_b: b}
"""


def test_misspelt_field_is_named_with_the_fix(tmp_path):
    with pytest.raises(RecipeError) as err:
        load_recipe(_write(tmp_path, BASE + "train: {stpes: 10}\n"))
    assert "train.stpes: unknown field (did you mean 'steps'?); remove it or fix its spelling" in str(err.value)


def test_pair_must_name_two_augmenters(tmp_path):
    with pytest.raises(RecipeError, match="pair.view_b 'c' is not an augmenter name"):
        load_recipe(_write(tmp_path, BASE.replace("view_b: b", "view_b: c")))


def test_pairings_name_augmenter_pairs_and_one_form_is_given(tmp_path):
    b = "{name: b, path: [en, ca, en]}"
    three = BASE.replace(f"{b}]", f"{b}, {{name: c, method: identity}}]")
    pairings = "{pairings: [[c, a], [c, b], [a, b]]}"
    recipe = load_recipe(_write(tmp_path, three.replace("{view_a: a, view_b: b}", pairings)))
    assert recipe.pair.pairs == [("c", "a"), ("c", "b"), ("a", "b")]
    assert "view_a" not in recipe.model_dump(mode="json")["pair"], "unset forms stay out of the recipe's hash"
    assert load_recipe(_write(tmp_path, BASE)).model_dump(mode="json")["pair"] == {"view_a": "a", "view_b": "b"}
    for pair, message in [
        ("{pairings: [[a, b]], view_a: a, view_b: b}", "give pair.pairings or pair.view_a with pair.view_b, not both"),
        ("{view_a: a}", "pair needs view_a and view_b (or pairings"),
        ("{pairings: [[a, b], [a, b]]}", "pair lists a pairing twice"),
        ("{pairings: [[a, d]]}", "pair.view_b 'd' is not an augmenter name"),
        ("{pairings: [[a, a]]}", "pair.view_a and pair.view_b must name different augmenters (a with itself)"),
    ]:
        with pytest.raises(RecipeError, match=re.escape(message)):
            load_recipe(_write(tmp_path, three.replace("{view_a: a, view_b: b}", pair)))


@pytest.mark.parametrize(
    ("text", "message"),
    [("name: [unclosed", "not valid YAML"), ("- a list", "must be a YAML mapping"), ("name: r\n", "corpus: required")],
)
def test_broken_recipes_get_one_clear_message(tmp_path, text, message):
    with pytest.raises(RecipeError, match=message):
        load_recipe(_write(tmp_path, text))


def test_missing_recipe_suggests_the_demo(tmp_path):
    with pytest.raises(RecipeError, match="try recipes/demo.yaml"):
        load_recipe(tmp_path / "nope.yaml")


def test_overrides_set_nested_values_and_are_validated():
    demo = DEMO
    recipe = load_recipe(demo, ["train.objective=ntxent", "train.hard_negative_weight=0", "corpus.limit=50"])
    assert (recipe.train.objective, recipe.train.hard_negative_weight, recipe.corpus.limit) == ("ntxent", 0, 50)
    assert recipe.train.temperature == 0.05
    with pytest.raises(RecipeError, match="train: .*ntxent has no head to warm up: set head_warmup_steps to 0"):
        load_recipe(demo, ["train.objective=ntxent", "train.head_warmup_steps=40"])
    with pytest.raises(RecipeError, match="not KEY=VALUE"):
        load_recipe(demo, ["train.objective"])
    with pytest.raises(RecipeError, match="'name' is not a section"):
        load_recipe(demo, ["name.x=1"])


@pytest.mark.parametrize("path", sorted((REPO / "recipes").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_recipe_and_each_of_its_sweep_configurations_is_valid(path):
    recipe = load_recipe(path)
    if recipe.sweep is not None:
        for config in recipe.sweep.expand():
            assert load_recipe(path, config.overrides()).train is not None


def test_dev_data_turns_on_dev_evaluation_unless_told_otherwise(tmp_path, tiny_recipe):
    dev = ["train.dev={name: d, format: stsb, path: sts.csv}"]
    assert load_recipe(tiny_recipe, dev).train.eval_every == 4  # 20, capped at the run's 4 steps
    assert load_recipe(tiny_recipe, [*dev, "train.eval_every=0"]).train.eval_every == 0
    assert load_recipe(tiny_recipe).train.eval_every == 0  # no dev data, nothing to score


def test_negatives_pairings_name_some_of_the_pairs_pairings(tmp_path):
    b = "{name: b, path: [en, ca, en]}"
    three = BASE.replace(f"{b}]", f"{b}, {{name: c, method: identity}}]")

    def pair(negatives_pairings: str) -> str:
        chosen = f", pairings: {negatives_pairings}" if negatives_pairings else ""
        negatives = f"{{source: mined{chosen}}}"
        return three.replace("{view_a: a, view_b: b}", f"{{pairings: [[c, a], [a, b]], negatives: {negatives}}}")

    recipe = load_recipe(_write(tmp_path, pair("[[c, a]]")))
    assert recipe.pair.negatives.pairings == [("c", "a")]
    assert recipe.model_dump(mode="json")["pair"]["negatives"]["pairings"] == [["c", "a"]]
    unset = load_recipe(_write(tmp_path, pair("")))
    assert unset.pair.negatives.pairings is None
    assert "pairings" not in unset.model_dump(mode="json")["pair"]["negatives"], "unset: the recipe's hash stays"
    for chosen, message in [
        ("[[a, c]]", "pair.negatives.pairings names ['a', 'c'], which is not one of the pair's pairings "
                     "[['c', 'a'], ['a', 'b']]: name one of those"),
        ("[[c, a], [c, a]]", "pair.negatives.pairings lists a pairing twice"),
        ("[]", "pairings"),
    ]:  # fmt: skip
        with pytest.raises(RecipeError, match=re.escape(message)):
            load_recipe(_write(tmp_path, pair(chosen)))
