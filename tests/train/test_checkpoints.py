"""Checkpoints, resume after SIGKILL, dev evaluation with the best state kept, early stopping."""

import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from viewmill.train.config import TrainConfig
from viewmill.train.loop import train_model

from tests.conftest import SENTENCES

PAIRS = [(s, s.replace("a ", "the ", 1)) for s in SENTENCES]
SETTINGS = dict(
    steps=6, head_warmup_steps=1, batch_size=8, options={"predictor_k": 2}, encoder_lr=1e-2, checkpoint_every=2
)


def _embed(path, texts=SENTENCES[:4]):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(path)).encode(texts)


TRAINING = textwrap.dedent("""
    import sys
    from pathlib import Path
    from tests.conftest import SENTENCES
    from viewmill.train.config import TrainConfig
    from viewmill.train.loop import train_model
    pairs = [(s, s.replace("a ", "the ", 1)) for s in SENTENCES]
    report = train_model(pairs, sys.argv[1], TrainConfig(**eval(sys.argv[2])), Path(sys.argv[3]),
                         card={"recipe": "t"}, on_step=lambda step, loss: print(step, flush=True))
    print("done", report.steps, len(report.dev_evals), flush=True)
""")
# Every run in its own process with the same thread settings: reductions split differently
# over threads and Adam turns that float noise into different weights (and Dask's
# LocalCluster, used by other tests, leaves OMP_NUM_THREADS=1 behind in this process).
THREADS = {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2", "OPENBLAS_NUM_THREADS": "2"}


def _training(tiny_model, out):
    return subprocess.Popen(
        [sys.executable, "-c", TRAINING, str(tiny_model), repr(SETTINGS), str(out)],
        stdout=subprocess.PIPE, text=True, env={**os.environ, **THREADS},
    )  # fmt: skip


def test_a_run_killed_mid_training_resumes_to_the_same_weights(tmp_path, tiny_model):
    uninterrupted = tmp_path / "whole"
    whole = _training(tiny_model, uninterrupted)
    whole.communicate()
    assert whole.returncode == 0

    resumed = tmp_path / "resumed"
    worker = _training(tiny_model, resumed)
    for line in worker.stdout:
        if line.strip() == "5":  # the checkpoint of step 4 is on disk; step 5 is not
            worker.send_signal(signal.SIGKILL)
            break
    worker.wait()
    checkpoint = resumed.with_name("resumed.checkpoint")
    assert (checkpoint / "state.pt").is_file() and not resumed.exists()

    again = _training(tiny_model, resumed)
    output = again.communicate()[0].split()
    assert again.returncode == 0
    assert output[:-3] == ["5", "6"], "only the steps after the last checkpoint run again"
    assert output[-3:] == ["done", "6", "0"]
    assert not checkpoint.exists(), "a finished run clears its checkpoints"
    np.testing.assert_allclose(_embed(resumed), _embed(uninterrupted), rtol=0, atol=1e-6)


def test_a_checkpoint_of_another_configuration_is_not_resumed(tmp_path, tiny_model):
    from viewmill.train.checkpoints import Checkpoints

    out = tmp_path / "model"
    stale = Checkpoints(out.with_name("model.checkpoint"), "another-configuration")
    stale._write("state.pt", {"key": "another-configuration"})
    steps = []
    train_model(PAIRS, str(tiny_model), TrainConfig(**SETTINGS), out, card={}, on_step=lambda s, _: steps.append(s))
    assert steps == [1, 2, 3, 4, 5, 6]
    assert not stale.folder.exists()


def test_dev_selection_exports_the_best_state_and_stops_early(tmp_path, tiny_model):
    scores = iter([50.0, 49.0, 48.0, 47.0, 46.0])  # training only makes it worse
    seen = []

    def dev(model):
        seen.append(model)
        return next(scores)

    config = TrainConfig(**{**SETTINGS, "eval_every": 2, "early_stopping_patience": 2})
    out = tmp_path / "model"
    report = train_model(PAIRS, str(tiny_model), config, out, card={}, dev=dev)
    assert report.dev_evals == [(0, 50.0), (2, 49.0), (4, 48.0)], "stopped after two evaluations without gain"
    assert report.steps == 4 and report.best_step == 0
    np.testing.assert_allclose(_embed(out), _embed(tiny_model), rtol=0, atol=1e-6)  # the start, untouched


def test_eval_every_needs_dev_data_and_patience_needs_eval_every(tmp_path, tiny_model):
    with pytest.raises(ValueError, match="eval_every needs dev data"):
        train_model(PAIRS, str(tiny_model), TrainConfig(**{**SETTINGS, "eval_every": 2}), tmp_path / "m", card={})
    with pytest.raises(ValueError, match="early_stopping_patience needs eval_every"):
        TrainConfig(early_stopping_patience=2)
