"""A model directory and its `models` row agree whatever point a run is killed at, and two
runs never train one model at once."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner
from viewmill.pipelines.cli.app import app
from viewmill.pipelines.recipe import load_recipe
from viewmill.pipelines.run import RunContext
from viewmill.pipelines.stages.train import train_stage
from viewmill.pipelines.state import StatePaths
from viewmill.storage.crash_points import CRASH_ENV
from viewmill.storage.lake import Lake
from viewmill.train.config import TrainConfig
from viewmill.train.export import (
    ModelBusyError,
    ModelIdentityError,
    is_complete_model,
    model_lock,
    read_manifest,
)
from viewmill.train.loop import train_model

from tests.conftest import SENTENCES, needs_apertium

TRAIN = """
import json, sys
from pathlib import Path
from viewmill.pipelines.recipe import load_recipe
from viewmill.pipelines.context import RunContext
from viewmill.pipelines.stages.train import train_stage
from viewmill.pipelines.state import StatePaths
ctx = RunContext(load_recipe(sys.argv[1]), StatePaths(Path(sys.argv[2])))
result = train_stage(ctx, sys.argv[3], sys.argv[4])
print(json.dumps({k: getattr(result, k) for k in ("path", "reused", "model_id", "selected_step")}))
"""


@pytest.fixture
def snapshot_state(tmp_path, tiny_snapshot):
    """A copy of a lake with the tiny recipe's pairs snapshot and no model yet."""
    recipe, built, snap = tiny_snapshot
    state = StatePaths(tmp_path / "state")
    shutil.copytree(built, state.root)
    return recipe, state, snap


def _train(recipe: Path, state: StatePaths, snap: dict, crash: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != CRASH_ENV}
    if crash:
        env[CRASH_ENV] = crash
    args = [sys.executable, "-c", TRAIN, str(recipe), str(state.root), snap["name"], snap["content_hash"]]
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=600)


def _models(state: StatePaths) -> list[dict]:
    with Lake(state.lake, read_only=True) as lake:
        return lake.arrow("SELECT model_id, path FROM models").to_pylist()


@needs_apertium
@pytest.mark.parametrize("point", ["export-partial", "exported", "recorded"])
def test_a_kill_at_any_point_of_publishing_loses_no_lineage(snapshot_state, point):
    recipe, state, snap = snapshot_state
    killed = _train(recipe, state, snap, crash=point)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    published = [p for p in state.models.iterdir() if is_complete_model(p) and not p.name.endswith(".staged")]
    assert published == [], "no model is in place before its row is recorded"
    assert len(_models(state)) == (1 if point == "recorded" else 0)
    again = _train(recipe, state, snap)
    assert again.returncode == 0, again.stderr[-2000:]
    result = json.loads(again.stdout.strip().splitlines()[-1])
    # A complete staged export is recorded and published, not trained again.
    assert result["reused"] is (point != "export-partial")
    assert _models(state) == [{"model_id": result["model_id"], "path": f"models/{Path(result['path']).name}"}]
    assert state.model_folder(_models(state)[0]["path"]) == Path(result["path"])
    assert read_manifest(Path(result["path"]))["model_id"] == result["model_id"]
    assert not Path(result["path"] + ".staged").exists()
    assert result["selected_step"] == 4


@needs_apertium
def test_a_second_run_on_a_model_in_training_is_refused(snapshot_state):
    recipe, state, snap = snapshot_state
    ctx = RunContext(load_recipe(recipe), state)
    first = train_stage(ctx, snap["name"], snap["content_hash"])
    path = Path(first.path)
    with model_lock(path):  # as a run in progress holds it
        with pytest.raises(ModelBusyError, match=f"another run is training the model {path}"):
            train_stage(ctx, snap["name"], snap["content_hash"])
        args = ["train", str(recipe), "--snapshot", snap["name"], "--no-prefect", "--state-dir", str(state.root)]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 1 and "another run is training the model" in result.output
        assert "Traceback" not in result.output
    assert train_stage(ctx, snap["name"], snap["content_hash"]).reused is True  # lock released: reused
    assert len(_models(state)) == 1


def test_train_model_refuses_checkpoints_another_run_holds(tmp_path, tiny_model):
    config = TrainConfig(steps=2, batch_size=8, head_warmup_steps=1, options={"predictor_k": 2})
    pairs = [(s, s.lower()) for s in SENTENCES]
    out = tmp_path / "model"
    held = model_lock(out.with_name("model.checkpoint"), "checkpoints of")
    with held, pytest.raises(ModelBusyError, match="another run is training the checkpoints of"):
        train_model(pairs, str(tiny_model), config, out, card={})
    assert not out.exists()
    train_model(pairs, str(tiny_model), config, out, card={})
    assert is_complete_model(out)


def _tamper(model: Path, how: str) -> str:
    """Change a published model the way `how` says; the message its reuse is refused with."""
    from safetensors.torch import load_file, save_file

    manifest = read_manifest(model)
    fix = f"move {model} aside (or delete it) and run again to train the model again"
    if how == "weights":
        weights = load_file(model / "model.safetensors")
        save_file({k: v * 2 for k, v in weights.items()}, model / "model.safetensors")
        return (
            f"{model / 'model.safetensors'} does not match the sha256 its viewmill.json recorded at export: this is "
            f"not the model {manifest['model_id']}; {fix}"
        )
    (model / "viewmill.json").write_text(json.dumps({**manifest, "model_id": "another-model"}))
    where = f"{model} is where the model {manifest['model_id']} is exported"
    return f"{model / 'viewmill.json'} names the model another-model, but {where}: {fix}"


@needs_apertium
@pytest.mark.parametrize("how", ["weights", "manifest"])
def test_a_published_model_that_is_not_its_export_is_never_reused(snapshot_state, how):
    recipe, state, snap = snapshot_state
    ctx = RunContext(load_recipe(recipe), state)
    first = train_stage(ctx, snap["name"], snap["content_hash"])
    path = Path(first.path)
    assert set(read_manifest(path)["files_sha256"]) >= {"model.safetensors", "config.json", "modules.json"}
    message = _tamper(path, how)
    with pytest.raises(ModelIdentityError) as refused:
        train_stage(ctx, snap["name"], snap["content_hash"])
    assert str(refused.value) == message
    args = ["train", str(recipe), "--snapshot", snap["name"], "--no-prefect", "--state-dir", str(state.root)]
    result = CliRunner().invoke(app, args)
    out = " ".join(result.output.split())
    assert result.exit_code == 1 and f"error: failed: {message}" in out and "Traceback" not in out
    kept = {p.relative_to(path): p.read_bytes() for p in path.rglob("*") if p.is_file()}
    aside = path.with_name("aside")
    path.rename(aside)  # the fix the message gives
    again = train_stage(ctx, snap["name"], snap["content_hash"])
    assert again.reused is False and again.model_id == first.model_id and is_complete_model(path)
    assert {p.relative_to(aside): p.read_bytes() for p in aside.rglob("*") if p.is_file()} == kept, "untouched"
    assert _models(state) == [{"model_id": first.model_id, "path": str(path.relative_to(state.root))}]


@needs_apertium
def test_an_export_older_than_file_hashes_is_reused_with_a_warning(snapshot_state, caplog):
    recipe, state, snap = snapshot_state
    ctx = RunContext(load_recipe(recipe), state)
    path = Path(train_stage(ctx, snap["name"], snap["content_hash"]).path)
    manifest = read_manifest(path)
    del manifest["files_sha256"]
    (path / "viewmill.json").write_text(json.dumps(manifest))
    with caplog.at_level(logging.WARNING):
        assert train_stage(ctx, snap["name"], snap["content_hash"]).reused is True
    assert (
        f"{path} was exported before viewmill recorded its model's file hashes: its weights cannot be checked "
        f"against viewmill.json; reusing it as the model {manifest['model_id']} (move {path} aside (or delete it) "
        "and run again to train the model again)"
    ) in caplog.messages


@needs_apertium
def test_a_staged_export_whose_weights_changed_is_not_published(snapshot_state):
    """A run killed after export leaves `<model>.staged`; changed files there are refused too."""
    recipe, state, snap = snapshot_state
    killed = _train(recipe, state, snap, crash="exported")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    (staged,) = [p for p in state.models.iterdir() if p.name.endswith(".staged")]
    shutil.copyfile(staged / "config.json", staged / "config.json.bak")
    (staged / "config.json").write_text((staged / "config.json.bak").read_text().replace('"gelu"', '"relu"'))
    again = _train(recipe, state, snap)
    assert again.returncode == 1 and f"{staged / 'config.json'} does not match the sha256" in again.stderr
    assert _models(state) == [] and staged.is_dir(), "nothing recorded or renamed; the staged export is kept"
