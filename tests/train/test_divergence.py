"""A loss that stops being a number stops training (issue 30, item 5): no model is exported,
recorded or published, the run is recorded as failed with the step and the fix, exit 1."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner
from viewmill.pipelines.cli.app import app
from viewmill.pipelines.recipe import load_recipe
from viewmill.pipelines.run import RunContext, run_recipe
from viewmill.pipelines.state import StatePaths
from viewmill.storage.lake import Lake
from viewmill.train.config import TrainConfig
from viewmill.train.loop import TrainingDiverged, train_model

from tests.conftest import SENTENCES, needs_apertium
from tests.lake_state import lake_state

runner = CliRunner()
FIX = (
    "lower the learning rate (train.encoder_lr, train.head_lr; the safe defaults are 1e-05 and 0.001) and run "
    "again; no model was exported"
)


def test_a_huge_learning_rate_stops_at_the_first_nan_loss_and_exports_nothing(tmp_path, tiny_model):
    pairs = [(s, s.lower()) for s in SENTENCES]
    config = TrainConfig(objective="ntxent", steps=6, batch_size=4, encoder_lr=1e30, checkpoint_every=1)
    out = tmp_path / "model"
    steps = []
    with pytest.raises(TrainingDiverged) as err:
        train_model(pairs, str(tiny_model), config, out, card={}, on_step=lambda step, loss: steps.append(step))
    message = str(err.value)
    assert message.startswith("loss became nan at step ")
    step = int(message.removeprefix("loss became nan at step ").split(" ")[0])
    assert 1 < step <= 6 and steps == list(range(1, step))  # the steps before it finished, then it stopped
    assert message.endswith(f"(encoder_lr=1e+30, head_lr=0.001, precision fp32): {FIX}")
    assert not out.exists() and list(tmp_path.iterdir()) == [], "no export and no checkpoints of a diverged run"


@needs_apertium
def test_a_diverged_run_is_recorded_failed_and_publishes_no_model(tmp_path, tiny_recipe):
    state = StatePaths(tmp_path / "state")
    summary = run_recipe(RunContext(load_recipe(tiny_recipe), state), train=False)
    snapshot = summary["snapshot"]["name"]
    before = lake_state(state.lake)
    args = ["train", str(tiny_recipe), "--snapshot", snapshot, "--no-prefect", "--state-dir", str(state.root),
            "--set", "train.encoder_lr=1e30", "--set", "train.checkpoint_every=1"]  # fmt: skip
    result = runner.invoke(app, args)
    out = " ".join(result.output.split())
    assert result.exit_code == 1, result.output
    assert "error: failed: TrainingDiverged: loss became nan at step " in out
    assert "(encoder_lr=1e+30, head_lr=" in out and f"precision fp32): {FIX}" in out
    after = lake_state(state.lake)
    assert after["snapshots"] == before["snapshots"]
    counts = dict(after["counts"])
    assert counts.pop("runs") == before["counts"]["runs"] + 1
    assert counts == {k: v for k, v in before["counts"].items() if k != "runs"}
    assert counts["models"] == 0
    assert not state.models.exists() or list(state.models.iterdir()) == [], "no model folder, staged or checkpoint"
    with Lake(state.lake, read_only=True) as lake:
        row = lake.arrow("SELECT status, error, counts FROM runs ORDER BY started_at DESC LIMIT 1").to_pylist()[0]
    assert row["status"] == "failed"
    assert row["error"].startswith("TrainingDiverged: loss became nan at step ") and row["error"].endswith(FIX)
