"""A full disk while training writes a checkpoint: one message naming the folder, `df -h` and
the step kept, exit 1, no partial checkpoint file, and a rerun that resumes from the last whole
checkpoint to the weights of an uninterrupted run (issue 30). Real tmpfs disks."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner
from viewmill.pipelines.cli.app import app
from viewmill.pipelines.recipe import load_recipe
from viewmill.pipelines.run import RunContext, run_recipe
from viewmill.pipelines.state import StatePaths
from viewmill.storage.lake import Lake
from viewmill.train import loop
from viewmill.train.checkpoints import Checkpoints, CheckpointWriteError
from viewmill.train.config import TrainConfig
from viewmill.train.export import is_complete_model

from tests.conftest import SENTENCES, needs_apertium
from tests.lake_state import lake_state
from tests.tmpfs import fill, tmpfs


@pytest.fixture
def full_disk(tmp_path):
    """A 16 MiB tmpfs, a function that fills it and the filler file (unlink it to free the disk)."""
    with tmpfs(tmp_path / "disk", "size=16m") as where:
        filler = where / "filler"
        yield where, lambda: fill(filler), filler


def _message(folder: Path, kept: str) -> str:
    return (
        f"no space left on device while writing a training checkpoint to {folder}: the partial checkpoint was removed "
        f"and {kept}; free space there (df -h {folder.parent}) or move the state directory to a larger disk, then "
        "run again"
    )


def test_a_full_disk_at_a_checkpoint_keeps_the_last_whole_one_and_the_rerun_ends_as_an_uninterrupted_run(
    tmp_path, tiny_model, full_disk
):
    from safetensors.torch import load

    disk, fill_disk, filler = full_disk
    config = TrainConfig(steps=6, batch_size=8, head_warmup_steps=1, options={"predictor_k": 2}, encoder_lr=1e-2,
                         checkpoint_every=2)  # fmt: skip
    pairs = [(s, s.lower()) for s in SENTENCES]
    out, checkpoints = disk / "model", disk / "model.checkpoint"

    def fill_after_step_2(step: int, _: float) -> None:
        if step == 2:  # after its checkpoint is written
            fill_disk()

    with pytest.raises(CheckpointWriteError) as failed:
        loop.train_model(pairs, str(tiny_model), config, out, card={}, on_step=fill_after_step_2)
    kept = "the last whole checkpoint (step 2) is kept: training resumes there"
    assert str(failed.value) == _message(checkpoints, kept)
    assert sorted(p.name for p in checkpoints.iterdir()) == ["objective-2.safetensors", "state.pt"], "no partial"
    assert not out.exists() and sorted(p.name for p in disk.iterdir()) == ["filler", "model.checkpoint"]

    filler.unlink()
    steps: list[int] = []
    loop.train_model(pairs, str(tiny_model), config, out, card={}, on_step=lambda step, _: steps.append(step))
    assert steps == [3, 4, 5, 6], "resumed after the last whole checkpoint"
    reference = tmp_path / "reference"
    loop.train_model(pairs, str(tiny_model), config, reference, card={})
    # read, not mapped: a mapped file would keep the disk busy
    got, expected = load((out / "model.safetensors").read_bytes()), load((reference / "model.safetensors").read_bytes())
    assert got.keys() == expected.keys() and all((got[k] == expected[k]).all() for k in got)
    assert not checkpoints.exists()


def test_a_full_disk_at_the_first_checkpoint_says_training_starts_over(tmp_path, tiny_model, full_disk):
    disk, fill_disk, _ = full_disk
    config = TrainConfig(steps=4, batch_size=8, head_warmup_steps=1, checkpoint_every=2)
    with pytest.raises(CheckpointWriteError) as failed:
        loop.train_model([(s, s.lower()) for s in SENTENCES], str(tiny_model), config, disk / "model", card={},
                         on_step=lambda step, _: fill_disk() if step == 1 else None)  # fmt: skip
    kept = "no earlier checkpoint was written, so training starts over"
    assert str(failed.value) == _message(disk / "model.checkpoint", kept)
    assert list((disk / "model.checkpoint").iterdir()) == []


@needs_apertium
def test_viewmill_train_on_a_full_disk_at_a_checkpoint_exits_1_and_the_rerun_publishes_one_model(
    tmp_path, tiny_recipe, full_disk, monkeypatch
):
    """The models folder on its own full disk: exit 1 with the message, the failed run recorded,
    the lake otherwise unchanged; with space freed the same command resumes and publishes."""
    disk, fill_disk, filler = full_disk
    state = StatePaths(tmp_path / "state")
    snap = run_recipe(RunContext(load_recipe(tiny_recipe), state), train=False)["snapshot"]
    (disk / "models").mkdir()
    state.models.symlink_to(disk / "models")
    before = lake_state(state.lake)
    real_save, saves = Checkpoints.save, []

    def save_filling_the_disk_before_the_second(self, *args):
        saves.append(1)
        if len(saves) == 2:
            fill_disk()
        return real_save(self, *args)

    monkeypatch.setattr(Checkpoints, "save", save_filling_the_disk_before_the_second)
    args = ["train", str(tiny_recipe), "--snapshot", snap["name"], "--no-prefect", "--state-dir", str(state.root),
            "--set", "train.checkpoint_every=1"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    out = " ".join(result.output.split())
    (checkpoints,) = [p for p in state.models.iterdir() if p.name.endswith(".checkpoint")]
    kept = "the last whole checkpoint (step 1) is kept: training resumes there"
    assert result.exit_code == 1 and "Traceback" not in out, out
    assert f"error: failed: {_message(checkpoints, kept)}" in out
    assert sorted(p.name for p in checkpoints.iterdir()) == ["objective-1.safetensors", "state.pt"]
    after = lake_state(state.lake)
    assert after["counts"].pop("runs") == before["counts"].pop("runs") + 1, "the failed run is recorded"
    assert after["counts"] == before["counts"] and after["snapshots"] == before["snapshots"]

    filler.unlink()
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output
    with Lake(state.lake, read_only=True) as lake:
        (path,) = [r[0] for r in lake.con.execute("SELECT path FROM models").fetchall()]
    assert is_complete_model(state.model_folder(path)) and not checkpoints.exists()
    assert sorted(p.name for p in state.models.iterdir()) == [Path(path).name], "one model, nothing else left"
