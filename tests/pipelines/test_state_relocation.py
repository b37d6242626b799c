"""A copied or moved state directory names its own model folders (issue 30, item 8): `models.path`
is recorded relative to the state, an absolute one written before (or by the state it was copied
from) resolves to this state's folder of that name, and `viewmill models trained` and
`viewmill eval MODEL_ID` use the copy's folder."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner
from viewmill.pipelines.cli.app import app
from viewmill.pipelines.recipe import load_recipe
from viewmill.pipelines.run import RunContext, run_recipe
from viewmill.pipelines.state import StatePaths
from viewmill.storage.lake import Lake

from tests.conftest import needs_apertium

runner = CliRunner()


def test_a_recorded_path_is_read_as_this_states_folder(tmp_path):
    state = StatePaths(tmp_path / "copy")
    assert state.recorded(state.models / "tiny-0123456789ab") == "models/tiny-0123456789ab"
    assert state.recorded(tmp_path / "outside" / "m") == str(tmp_path / "outside" / "m")
    assert state.model_folder("models/tiny-0123456789ab") == state.models / "tiny-0123456789ab"
    old = str(tmp_path / "original" / "models" / "tiny-0123456789ab")  # a row written before, by the original
    assert state.model_folder(old) == state.models / "tiny-0123456789ab"
    assert state.model_folder(str(state.models / "x")) == state.models / "x"
    assert state.model_folder(str(tmp_path / "elsewhere" / "x")) == tmp_path / "elsewhere" / "x"


@pytest.fixture
def copied_state(tmp_path, tiny_recipe):
    """A state with one trained model, copied elsewhere; the original is then moved away."""
    original = StatePaths(tmp_path / "original")
    summary = run_recipe(RunContext(load_recipe(tiny_recipe), original), evaluate=False)
    model_id, folder = summary["train"]["model_id"], Path(summary["train"]["path"])
    copy = StatePaths(tmp_path / "copy")
    shutil.copytree(original.root, copy.root, symlinks=True)
    original.root.rename(tmp_path / "moved-away")  # anything still naming the original now fails
    return copy, model_id, folder.name


@needs_apertium
def test_a_copied_state_names_its_own_model_folder(tmp_path, copied_state):
    copy, model_id, name = copied_state
    with Lake(copy.lake, read_only=True) as lake:
        assert lake.scalar("SELECT path FROM models") == f"models/{name}"
    result = runner.invoke(app, ["models", "trained", "--state-dir", str(copy.root)])
    assert result.exit_code == 0, result.output
    row = next(line for line in result.stdout.splitlines() if model_id[:12] in line)
    assert "yes" in row and "missing" not in row
    assert str(copy.models / name) in "".join(result.stdout.split()), result.stdout  # the table folds long paths

    suite = tmp_path / "suite.yaml"
    shutil.copy(tmp_path / "sts.csv", tmp_path / "suite-sts.csv")
    suite.write_text("tasks: [{name: fixture, format: stsb, path: suite-sts.csv}]\n", encoding="utf-8")
    args = ["eval", model_id[:12], "--suite", str(suite), "--no-baselines", "--state-dir", str(copy.root)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert f"| {name} |" in result.stdout  # the copy's folder, labelled by its name
    with Lake(copy.lake, read_only=True) as lake:
        assert lake.scalar("SELECT count(*) FROM evals WHERE model = ?", [model_id]) == 1


@needs_apertium
def test_an_unknown_model_id_is_named(copied_state):
    copy, _, _ = copied_state
    result = runner.invoke(app, ["eval", "feedfacefeedface", "--state-dir", str(copy.root)])
    assert result.exit_code == 2
    assert " ".join(result.stderr.split()) == (
        f"error: feedfacefeedface names no model of {copy.root}: viewmill models trained lists them (give the "
        "model id, or its folder)"
    )
