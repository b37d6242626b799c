"""SIGKILL late in training (after its last checkpoint) and while the export is written: the
rerun publishes exactly one model, with the id and the exported files of an uninterrupted run,
and nothing a killed process left is taken for a model or left behind (issue 30)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from viewmill.pipelines.state import StatePaths
from viewmill.storage.lake import Lake
from viewmill.train.checkpoints import load_state_file
from viewmill.train.export import CRASH_ENV, is_complete_model, read_manifest
from viewmill.train.manifest import HASHES

from tests.conftest import needs_apertium
from tests.lake_state import lake_state

pytestmark = [needs_apertium, pytest.mark.slow]  # a reference run and two more per case
OVERRIDES = ["train.steps=6", "train.checkpoint_every=1"]
KILL_ENV = "VIEWMILL_TEST_KILL_AFTER_CHECKPOINT"
TRAIN = f"""
import json, os, signal, sys
from pathlib import Path
from viewmill.pipelines.context import RunContext
from viewmill.pipelines.recipe import load_recipe
from viewmill.pipelines.stages.train import train_stage
from viewmill.pipelines.state import StatePaths
from viewmill.train.checkpoints import Checkpoints

kill_after, save = int(os.environ.get("{KILL_ENV}", "0")), Checkpoints.save

def save_then_die(self, state, *args):
    save(self, state, *args)
    if state.step == kill_after:
        os.kill(os.getpid(), signal.SIGKILL)

Checkpoints.save = save_then_die
ctx = RunContext(load_recipe(sys.argv[1], sys.argv[5:]), StatePaths(Path(sys.argv[2])))
result = train_stage(ctx, sys.argv[3], sys.argv[4])
print(json.dumps({{k: getattr(result, k) for k in ("path", "reused", "model_id", "selected_step")}}))
"""


def _train(recipe: Path, state: StatePaths, snap: dict, env: dict[str, str]) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in (CRASH_ENV, KILL_ENV)}
    args = [sys.executable, "-c", TRAIN, str(recipe), str(state.root), snap["name"], snap["content_hash"], *OVERRIDES]
    return subprocess.run(args, capture_output=True, text=True, env={**clean, **env}, timeout=600)


def _models(state: StatePaths) -> list[dict]:
    with Lake(state.lake, read_only=True) as lake:
        return lake.arrow("SELECT model_id, path FROM models").to_pylist()


@pytest.fixture(scope="module")
def reference(tmp_path_factory, tiny_snapshot) -> dict:
    """The tiny recipe's snapshot trained without interruption (once for every case)."""
    recipe, built, snap = tiny_snapshot
    reference = StatePaths(tmp_path_factory.mktemp("kill-late") / "reference")
    shutil.copytree(built, reference.root)
    done = _train(recipe, reference, snap, {})
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def killed_and_reference(tmp_path, tiny_snapshot, reference):
    """A copy of a lake with the tiny recipe's snapshot, and that snapshot trained without interruption."""
    recipe, built, snap = tiny_snapshot
    state = StatePaths(tmp_path / "state")
    shutil.copytree(built, state.root)
    return recipe, state, snap, reference


@pytest.mark.parametrize("when", ["after-the-last-checkpoint", "export-partial"])
def test_a_kill_late_in_training_or_during_export_and_the_rerun_publish_one_model_of_the_same_id(
    killed_and_reference, when
):
    recipe, state, snap, reference = killed_and_reference
    before = lake_state(state.lake)
    env = {KILL_ENV: "5"} if when == "after-the-last-checkpoint" else {CRASH_ENV: "export-partial"}
    killed = _train(recipe, state, snap, env)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    # A killed process's lock files stay (the OS released its locks); the next run removes them.
    left = sorted(p.name for p in state.models.iterdir() if p.suffix != ".lock")
    assert not any(is_complete_model(state.models / name) for name in left), "no model in place, staged or not"
    assert _models(state) == [] and lake_state(state.lake) == before
    name = Path(reference["path"]).name
    if when == "after-the-last-checkpoint":
        assert left == [f"{name}.staged.checkpoint"]
        assert load_state_file(state.models / left[0] / "state.pt")["run"]["step"] == 5
    else:
        partial = [n for n in left if n.startswith(f"{name}.staged.partial-")]
        assert len(partial) == 1 and not is_complete_model(state.models / partial[0]), left

    again = _train(recipe, state, snap, {})
    assert again.returncode == 0, again.stderr[-2000:]
    result = json.loads(again.stdout.strip().splitlines()[-1])
    assert result["model_id"] == reference["model_id"] and not result["reused"]
    (row,) = _models(state)
    assert row["model_id"] == reference["model_id"] and Path(row["path"]).name == name, row
    assert sorted(p.name for p in state.models.iterdir()) == [name], "no staged, partial or checkpoint folder left"
    exported = read_manifest(state.models / name)
    assert exported[HASHES] == read_manifest(Path(reference["path"]))[HASHES], "the same files as uninterrupted"
    after = lake_state(state.lake)
    assert after["counts"] == {**before["counts"], "models": 1} and after["snapshots"] == before["snapshots"]
