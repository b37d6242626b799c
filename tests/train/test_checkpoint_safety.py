"""A crafted checkpoint cannot run code: training state loads with weights_only and model
weights from safetensors; a pickle with a payload is refused with a message."""

from __future__ import annotations

import pathlib

import pytest
import torch
from safetensors import safe_open
from viewmill.train.checkpoints import CheckpointError, Checkpoints
from viewmill.train.config import TrainConfig
from viewmill.train.loop import train_model

from tests.conftest import SENTENCES

PAIRS = [(s, s.replace("a ", "the ", 1)) for s in SENTENCES]
SETTINGS = dict(
    steps=4, head_warmup_steps=1, batch_size=8, options={"predictor_k": 2}, encoder_lr=1e-2, checkpoint_every=2
)


class Payload:
    """Unpickling this touches `marker`: what an attacker's code would do."""

    def __init__(self, marker: pathlib.Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (pathlib.Path.touch, (self.marker,))


def test_a_crafted_checkpoint_is_refused_and_runs_nothing(tmp_path, tiny_model):
    out, marker = tmp_path / "model", tmp_path / "pwned"
    folder = out.with_name("model.checkpoint")
    folder.mkdir()
    torch.save({"key": "whatever", "run": Payload(marker)}, folder / "state.pt")
    with pytest.raises(CheckpointError) as refused:
        train_model(PAIRS, str(tiny_model), TrainConfig(**SETTINGS), out, card={})
    message = str(refused.value)
    assert message.startswith(f"checkpoint {folder / 'state.pt'} is not a plain weights-and-values file")
    assert message.endswith(f"delete {folder} to start this training from scratch")
    assert not marker.exists(), "the payload ran"
    assert not out.exists() and (folder / "state.pt").is_file(), "nothing exported, the evidence kept"
    # The file is a working exploit under the old loading: the refusal above is what stopped it.
    torch.load(folder / "state.pt", weights_only=False)
    assert marker.exists()


def test_checkpoints_hold_safetensors_weights_and_plain_state(tmp_path, tiny_model):
    seen = {}

    def look(step, _loss):
        state = folder / "state.pt"
        if step == 3 and state.is_file():  # the checkpoint of step 2
            seen["state"] = torch.load(state, weights_only=True)
            seen["files"] = sorted(p.name for p in folder.iterdir())

    out = tmp_path / "model"
    folder = out.with_name("model.checkpoint")
    train_model(PAIRS, str(tiny_model), TrainConfig(**SETTINGS), out, card={}, on_step=look)
    assert seen["files"] == ["objective-2.safetensors", "state.pt"]
    assert seen["state"]["weights"] == "objective-2.safetensors" and seen["state"]["run"]["step"] == 2
    assert not folder.exists(), "a finished run clears its checkpoints"


def test_a_checkpoint_round_trips_the_random_generators(tmp_path):
    import random

    import numpy as np
    from viewmill.train.checkpoints import RunState

    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    checkpoints = Checkpoints(tmp_path / "c", "k")
    checkpoints.save(RunState(step=7, losses=[1.0]), model, optimizer, None)
    expected = (torch.rand(2).tolist(), np.random.rand(2).tolist(), random.random())
    with safe_open(tmp_path / "c" / "objective-7.safetensors", "pt") as weights:
        assert sorted(weights.keys()) == ["bias", "weight"]
    torch.nn.init.zeros_(model.weight)
    restored = checkpoints.restore(model, optimizer, None)
    assert restored == RunState(step=7, losses=[1.0])
    assert (torch.rand(2).tolist(), np.random.rand(2).tolist(), random.random()) == expected
    assert model.weight.abs().sum() > 0
