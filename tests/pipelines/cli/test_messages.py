"""A mistyped recipe key, method, engine, objective or corpus format is answered with the close
names (issue 23.11), and no message carries pydantic's "Value error," prefix."""

import pytest
from typer.testing import CliRunner
from viewmill.pipelines.cli.app import app
from viewmill.pipelines.recipe import RecipeError, load_recipe

from viewmill.spelling import did_you_mean

runner = CliRunner()
BASE = {
    "name": "name: r",
    "corpus": "corpus: {files: [c.txt]}",
    "augmenters": "augmenters: [{name: a, method: identity}, {name: b, method: identity}]",
    "pair": "pair: {view_a: a, view_b: b}",
}


def _error(tmp_path, **changed: str) -> str:
    (tmp_path / "c.txt").write_text("A cat sits on the mat.\n", encoding="utf-8")
    recipe = tmp_path / "r.yaml"
    recipe.write_text("\n".join({**BASE, **changed}.values()) + "\n", encoding="utf-8")
    with pytest.raises(RecipeError) as caught:
        load_recipe(recipe)
    message = str(caught.value)
    assert "Value error" not in message and "Assertion failed" not in message
    return message


def test_did_you_mean_names_the_close_names_only():
    assert did_you_mean("sq", ["sql", "run", "lake"]) == " (did you mean 'sql'?)"
    assert did_you_mean("nxtent", ["ntxent", "infonce", "bsl"]) == " (did you mean 'ntxent'?)"
    assert did_you_mean("zzz", ["sql", "run"]) == ""


def test_a_mistyped_recipe_key_is_answered_with_the_key_meant(tmp_path):
    top = _error(tmp_path, extra="evaluat: {tasks: []}")
    assert "  - evaluat: unknown field (did you mean 'evaluate'?); remove it or fix its spelling" in top
    nested = _error(tmp_path, corpus="corpus: {files: [c.txt], langg: en}")
    assert "  - corpus.langg: unknown field (did you mean 'lang'?)" in nested
    train = _error(tmp_path, train="train: {objective: bsl, stpes: 10}")
    assert "  - train.stpes: unknown field (did you mean 'steps'?)" in train
    member = _error(tmp_path, augmenters="augmenters: [{name: a, method: synonym, ratoi: 0.3}, "
                                         "{name: b, method: identity}]")  # fmt: skip
    assert "augmenters.0.synonym.ratoi: unknown field (did you mean 'ratio'?)" in member


def test_mistyped_registry_names_are_answered_with_the_name_meant(tmp_path):
    method = _error(tmp_path, augmenters="augmenters: [{name: a, method: synonim}, {name: b, method: identity}]")
    assert "augmenters.0: unknown augmenter method 'synonim' (did you mean 'synonym'?): use one of " in method
    engine = _error(tmp_path, augmenters="augmenters: [{name: a, method: backtranslation, path: [en, es, en], "
                                         "engine: apertum}, {name: b, method: identity}]")  # fmt: skip
    assert "unknown engine 'apertum' (did you mean 'apertium'?): use one of apertium, " in engine
    objective = _error(tmp_path, train="train: {objective: nxtent}")
    assert "train.objective: unknown objective 'nxtent' (did you mean 'ntxent'?): use one of bsl, " in objective
    corpus = _error(tmp_path, corpus="corpus: {files: [c.txt], format: txt}")
    assert "corpus.format: unknown corpus format 'txt' (did you mean 'text'?): use one of text, " in corpus


def test_the_cli_shows_the_suggestion_as_one_message(tmp_path):
    (tmp_path / "c.txt").write_text("A cat sits on the mat.\n", encoding="utf-8")
    recipe = tmp_path / "r.yaml"
    recipe.write_text("\n".join({**BASE, "train": "train: {objective: infonse}"}.values()) + "\n", encoding="utf-8")
    result = runner.invoke(app, ["run", str(recipe), "--no-prefect", "--state-dir", str(tmp_path / "s")])
    assert result.exit_code == 2 and result.stdout == ""
    assert "unknown objective 'infonse' (did you mean 'infonce'?)" in result.stderr
    assert "Value error" not in result.stderr and "Traceback" not in result.stderr
