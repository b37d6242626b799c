"""A run that skips evaluation (issue 33.6): `viewmill run --no-eval`, or a recipe whose evaluate
section lists no tasks; a suite without tasks is still refused."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner
from viewmill.pipelines.cli.app import app
from viewmill.pipelines.recipe import RecipeError, load_recipe, load_suite
from viewmill.pipelines.state import StatePaths
from viewmill.storage.lake import Lake

from tests.conftest import needs_apertium

runner = CliRunner()


def _evals(state: StatePaths) -> list[tuple]:
    with Lake(state.lake, read_only=True) as lake:
        return lake.con.execute("SELECT model_label, task FROM evals ORDER BY ALL").fetchall()


@needs_apertium
def test_no_eval_and_an_empty_task_list_train_without_evaluating(tmp_path, tiny_recipe):
    state = StatePaths(tmp_path / "state")
    args = ["run", str(tiny_recipe), "--no-prefect", "--state-dir", str(state.root)]
    skipped = runner.invoke(app, [*args, "--no-eval"])
    assert skipped.exit_code == 0, skipped.output
    assert "model " in skipped.stdout and "evaluation" not in skipped.stdout and "evaluate " not in skipped.stderr
    assert _evals(state) == [], "nothing scored"
    with Lake(state.lake, read_only=True) as lake:
        assert lake.con.execute("SELECT count(*) FROM models").fetchone() == (1,), "the model is trained and recorded"
        first_step, train = lake.con.execute(
            "SELECT timings->>'$.train_first_step', timings->>'$.train' FROM runs ORDER BY started_at LIMIT 1"
        ).fetchone()
    assert 0 < float(first_step) < float(train), "the run records its start-up to the first training step"

    assert load_recipe(tiny_recipe, ["evaluate.tasks=[]"]).evaluate.tasks == []
    empty = runner.invoke(app, [*args, "--set", "evaluate.tasks=[]"])
    assert empty.exit_code == 0, empty.output
    assert "evaluation" not in empty.stdout and _evals(state) == []

    evaluated = runner.invoke(app, args)  # the same run with its evaluation: the model reused, then scored
    assert evaluated.exit_code == 0, evaluated.output
    assert {label for label, _ in _evals(state)} >= {"untrained"} and "evaluation" in evaluated.stdout


def test_a_suite_without_tasks_is_refused(tmp_path):
    suite = tmp_path / "suite.yaml"
    suite.write_text("tasks: []\n", encoding="utf-8")
    with pytest.raises(RecipeError, match=f"suite {suite} has no tasks: name at least one under tasks:"):
        load_suite(suite)
