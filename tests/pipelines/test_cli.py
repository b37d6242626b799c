import json

import pytest
from typer.testing import CliRunner

from pipelines.cli import app
from pipelines.recipe import load_recipe
from pipelines.stages import RunContext, run_recipe
from pipelines.state import StatePaths
from tests.conftest import needs_apertium

runner = CliRunner()


@pytest.fixture
def state_with_run(tmp_path, tiny_recipe):
    state = StatePaths(tmp_path / "state")
    summary = run_recipe(RunContext(load_recipe(tiny_recipe), state))
    return state, summary


@needs_apertium
def test_sql_answers_questions_over_the_lake(state_with_run):
    state, summary = state_with_run
    query = "SELECT augmenter, status, count(*) AS n FROM views GROUP BY ALL ORDER BY ALL"
    result = runner.invoke(app, ["sql", query, "--state-dir", str(state.root), "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert sum(r["n"] for r in rows if r["augmenter"] == "bt_es") == 20
    table = runner.invoke(app, ["sql", "SELECT count(*) AS pairs FROM pairs", "--state-dir", str(state.root)])
    assert str(summary["snapshot"]["n_pairs"]) in table.output and "1 row(s)" in table.output
    snaps = runner.invoke(app, ["lake", "snapshots", "--state-dir", str(state.root)])
    assert summary["snapshot"]["name"] in snaps.output
    out = state.root.parent / "pairs.jsonl"
    name = summary["snapshot"]["name"]
    exported = runner.invoke(app, ["lake", "export", name, str(out), "--state-dir", str(state.root)])
    assert exported.exit_code == 0, exported.output
    assert len(out.read_text().splitlines()) == summary["snapshot"]["n_pairs"]
    unknown = runner.invoke(app, ["lake", "export", "recipe-nope", str(out), "--state-dir", str(state.root)])
    assert unknown.exit_code == 2 and "no pairs snapshot named 'recipe-nope'" in unknown.output


@needs_apertium
def test_bad_sql_is_one_clear_error(state_with_run):
    state, _ = state_with_run
    result = runner.invoke(app, ["sql", "SELECT nope FROM views", "--state-dir", str(state.root)])
    assert result.exit_code == 2 and "query failed" in result.output and "nope" in result.output


def test_sql_without_a_lake_says_how_to_make_one(tmp_path):
    result = runner.invoke(app, ["sql", "SELECT 1", "--state-dir", str(tmp_path)])
    assert result.exit_code == 2 and "viewmill run recipes/demo.yaml" in result.output


def test_run_with_a_broken_recipe_exits_2_with_the_field_named(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: r\ncorpus: {files: [x.txt]}\naugmenters: []\npair: {view_a: a, view_b: b}\n")
    result = runner.invoke(app, ["run", str(recipe), "--state-dir", str(tmp_path / "s")])
    assert result.exit_code == 2 and "augmenters" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "s").exists()
