"""A full disk while a model is exported: one message naming the folder and the fix, exit 1,
no partial folder left, and nothing written before lost (the lake, an older export, the
training checkpoints the rerun resumes from). Issue 21.10."""

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
from viewmill.train.config import TrainConfig
from viewmill.train.export import ExportError, export, is_complete_model

from tests.conftest import SENTENCES, needs_apertium
from tests.lake_state import lake_state
from tests.tmpfs import fill, tmpfs

SAFETENSORS_FULL = "Error while serializing: I/O error: No space left on device (os error 28)"  # its real words


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".partial-" in p.name)


def test_a_full_disk_while_writing_weights_is_one_message_and_the_older_export_stays(tmp_path, tiny_model, monkeypatch):
    """safetensors' own error (no path, no errno) becomes ExportError; the export being replaced is kept."""
    import transformers.modeling_utils
    from safetensors import SafetensorError
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(tiny_model), device="cpu")
    config = TrainConfig(steps=2, batch_size=8, head_warmup_steps=1)
    manifest = {"model_id": "m", "train_config": config.model_dump(), "report": {"steps": 1}, "selected_step": 1,
                "max_seq_length": config.max_length}  # fmt: skip
    out = tmp_path / "models" / "m"
    export(model, out, manifest)
    before = _files(out)

    def full_disk(tensors, filename, metadata=None):
        Path(filename).write_bytes(b"\0" * 1024)  # what got written before the disk filled
        raise SafetensorError(SAFETENSORS_FULL)

    monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", full_disk)
    with pytest.raises(ExportError) as failed:
        export(model, out, manifest)
    assert str(failed.value) == (
        f"no space left on device while exporting the model to {out}: the partial export was removed and nothing "
        f"written before was changed; free space there (df -h {out.parent}) or move the state directory to a "
        "larger disk, then run again"
    )
    assert _files(out) == before and _leftovers(out.parent) == []


@pytest.fixture
def full_disk(tmp_path):
    """A 16 MiB tmpfs and a function that fills it."""
    with tmpfs(tmp_path / "disk", "size=16m") as where:
        filler = where / "filler"
        yield where, lambda: fill(filler), filler


@needs_apertium
@pytest.mark.parametrize("layout", ["models-on-their-own-disk", "whole-state-on-one-disk"])
def test_a_full_disk_during_export_exits_1_naming_the_folder_and_the_rerun_resumes(
    tmp_path, tiny_recipe, full_disk, monkeypatch, caplog, layout
):
    """A real tmpfs that fills up once training is done: the export fails as a disk really
    fails (safetensors' os error 28); the lake and the checkpoints are kept. With the lake on
    the same full disk the failed run cannot be recorded: a warning says so, and the export's
    message is still the one reported."""
    disk, fill, filler = full_disk
    state = StatePaths((disk if layout == "whole-state-on-one-disk" else tmp_path) / "state")
    snap = run_recipe(RunContext(load_recipe(tiny_recipe), state), train=False)["snapshot"]
    if layout == "models-on-their-own-disk":
        (disk / "models").mkdir()
        state.models.symlink_to(disk / "models")
    lake_before = lake_state(state.lake)
    real_export = loop.export

    def export_on_a_full_disk(*args, **kwargs):
        fill()
        return real_export(*args, **kwargs)

    monkeypatch.setattr(loop, "export", export_on_a_full_disk)
    args = ["train", str(tiny_recipe), "--snapshot", snap["name"], "--no-prefect", "--state-dir", str(state.root),
            "--set", "train.checkpoint_every=2"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    out = " ".join(result.output.split())
    (checkpoints,) = [p for p in state.models.iterdir() if p.name.endswith(".staged.checkpoint")]
    staged = checkpoints.with_name(checkpoints.name.removesuffix(".checkpoint"))
    assert result.exit_code == 1 and "Traceback" not in out, out
    assert (
        f"error: failed: no space left on device while exporting the model to {staged}: the partial export was "
        f"removed and nothing written before was changed; free space there (df -h {state.models}) or move the "
        f"state directory to a larger disk, then run again: training resumes from its last checkpoint, kept in "
        f"{checkpoints}"
    ) in out
    assert not staged.exists() and _leftovers(state.models) == [], "no partial export is left"
    assert (checkpoints / "state.pt").is_file(), "the checkpoint the rerun resumes from is kept"
    after = lake_state(state.lake)
    assert after["snapshots"] == lake_before["snapshots"] and after["counts"]["models"] == 0
    runs = after["counts"].pop("runs") - lake_before["counts"].pop("runs")
    assert after["counts"] == lake_before["counts"]
    assert runs == 1, "the run's row, written when it started"
    if layout == "whole-state-on-one-disk":  # its end cannot be recorded: the row still says running
        assert any("could not be recorded in `runs`: no space left" in m for m in caplog.messages)

    filler.unlink()  # space freed: the same command completes
    monkeypatch.setattr(loop, "export", real_export)
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output
    with Lake(state.lake, read_only=True) as lake:
        (path,) = [r[0] for r in lake.con.execute("SELECT path FROM models").fetchall()]
    assert is_complete_model(state.model_folder(path)) and not checkpoints.exists()


def test_train_model_on_a_full_disk_keeps_its_checkpoints_and_resumes_to_the_same_weights(
    tmp_path, tiny_model, full_disk
):
    """`train_model` alone: the export fails for real, a rerun resumes and exports what an
    uninterrupted run exports."""
    from safetensors.torch import load_file

    disk, fill, filler = full_disk
    config = TrainConfig(steps=4, batch_size=8, head_warmup_steps=1, options={"predictor_k": 2}, encoder_lr=1e-2,
                         checkpoint_every=2)  # fmt: skip
    pairs = [(s, s.lower()) for s in SENTENCES]
    out = disk / "model"
    with pytest.raises(ExportError, match=f"exporting the model to {out}: .* resumes from its last checkpoint"):
        train_model_filling(pairs, tiny_model, config, out, fill)
    assert not out.exists() and _leftovers(disk) == [] and (disk / "model.checkpoint" / "state.pt").is_file()
    filler.unlink()
    loop.train_model(pairs, str(tiny_model), config, out, card={})
    reference = tmp_path / "reference"
    loop.train_model(pairs, str(tiny_model), config, reference, card={})
    got, expected = load_file(out / "model.safetensors"), load_file(reference / "model.safetensors")
    assert got.keys() == expected.keys() and all((got[k] == expected[k]).all() for k in got)


def train_model_filling(pairs, tiny_model: Path, config: TrainConfig, out: Path, fill) -> None:
    """Train, filling the disk after the last step (its checkpoints are written by then)."""
    loop.train_model(pairs, str(tiny_model), config, out, card={},
                     on_step=lambda step, _: fill() if step == config.steps else None)  # fmt: skip
