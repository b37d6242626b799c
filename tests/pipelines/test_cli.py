import json

import pytest
from typer.testing import CliRunner
from viewmill.pipelines.cli import app
from viewmill.pipelines.recipe import load_recipe
from viewmill.pipelines.stages import RunContext, run_recipe
from viewmill.pipelines.state import StatePaths

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


@needs_apertium
def test_train_on_an_existing_snapshot_records_a_new_model(state_with_run, tiny_recipe):
    from viewmill.storage.lake import Lake

    state, summary = state_with_run
    name = summary["snapshot"]["name"]
    args = ["train", str(tiny_recipe), "--snapshot", name, "--state-dir", str(state.root), "--no-prefect"]
    result = runner.invoke(app, [*args, "--set", "train.encoder_lr=5e-3"])
    assert result.exit_code == 0, result.output
    with Lake(state.lake, read_only=True) as lake:
        models = lake.arrow("SELECT snapshot, train_config FROM models ORDER BY created_at").to_pylist()
        runs = lake.arrow("SELECT flow, counts FROM runs ORDER BY started_at")["flow"].to_pylist()
    assert len(models) == 2 and {m["snapshot"] for m in models} == {name}
    assert json.loads(models[1]["train_config"])["train_config"]["encoder_lr"] == 5e-3
    assert runs == ["plain", "plain"]
    args[3] = "recipe-nope"
    missing = runner.invoke(app, args)
    assert missing.exit_code == 2 and "no pairs snapshot named 'recipe-nope'" in missing.output


def test_dask_without_prefect_and_a_malformed_dask_address_are_refused_before_anything_runs(tmp_path, tiny_recipe):
    state = tmp_path / "state"
    local = runner.invoke(
        app, ["run", str(tiny_recipe), "--no-prefect", "--dask", "local:2", "--state-dir", str(state)]
    )
    assert local.exit_code == 2 and "drop --no-prefect, or drop --dask" in local.output
    sweep = runner.invoke(app, ["sweep", str(tiny_recipe), "--state-dir", str(state)])
    assert sweep.exit_code == 2 and "has no sweep section" in sweep.output
    assert not state.exists()


def test_a_malformed_dask_address_names_the_form_to_use():
    from viewmill.pipelines.flows import task_runner
    from viewmill.pipelines.recipe import RecipeError

    with pytest.raises(RecipeError, match="write local:N"):
        task_runner("local:two")
