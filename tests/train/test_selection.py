"""Best-checkpoint selection and early stopping (train/selection.py) on real checkpoints."""

import torch
from torch import nn
from viewmill.train.checkpoints import Checkpoints, RunState
from viewmill.train.config import TrainConfig
from viewmill.train.selection import evaluates_at, patience_spent, score_dev, select_weights


def _config(**fields) -> TrainConfig:
    return TrainConfig(head_warmup_steps=0, **fields)  # few steps: no head warm-up


def _run(tmp_path, scores: list[tuple[int, float]]) -> tuple[nn.Linear, RunState, Checkpoints, dict[int, dict]]:
    """A model whose weights at each evaluated step are filled with the step number."""
    model, state, checkpoints, weights = nn.Linear(2, 2), RunState(), Checkpoints(tmp_path / "ck", "k"), {}
    for step, score in scores:
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(float(step))
        weights[step] = {k: v.clone() for k, v in model.state_dict().items()}
        state.step = step
        state.record(step, score, model, checkpoints)
    return model, state, checkpoints, weights


def test_keep_best_exports_the_best_dev_weights(tmp_path):
    model, state, checkpoints, weights = _run(tmp_path, [(0, 50.0), (2, 61.0), (4, 55.0)])
    config = _config(steps=4, eval_every=2, keep_best=True)
    assert select_weights(config, state, model, checkpoints) == 2
    assert torch.equal(model.weight, weights[2]["weight"]) and torch.equal(model.bias, weights[2]["bias"])


def test_the_start_can_be_the_best_and_then_it_is_exported(tmp_path):
    model, state, checkpoints, weights = _run(tmp_path, [(0, 70.0), (2, 61.0), (4, 55.0)])
    assert select_weights(_config(steps=4, eval_every=2, keep_best=True), state, model, checkpoints) == 0
    assert torch.equal(model.weight, weights[0]["weight"])


def test_without_keep_best_the_last_weights_stay(tmp_path):
    model, state, checkpoints, weights = _run(tmp_path, [(0, 50.0), (2, 61.0), (4, 55.0)])
    assert select_weights(_config(steps=4, eval_every=2, keep_best=False), state, model, checkpoints) == 4
    assert torch.equal(model.weight, weights[4]["weight"])
    assert select_weights(_config(steps=4), state, model, checkpoints) == 4


def test_patience_counts_evaluations_since_the_best(tmp_path):
    _, state, _, _ = _run(tmp_path, [(0, 50.0), (2, 61.0), (4, 55.0), (6, 58.0)])
    assert patience_spent(_config(steps=8, eval_every=2, early_stopping_patience=2), state) is True
    assert patience_spent(_config(steps=8, eval_every=2, early_stopping_patience=3), state) is False
    assert patience_spent(_config(steps=8, eval_every=2), state) is False


def test_evaluation_steps_and_dev_scoring_in_eval_mode():
    config = _config(steps=8, eval_every=3)
    assert [s for s in range(1, 9) if evaluates_at(config, s)] == [3, 6]
    assert not any(evaluates_at(_config(steps=8), s) for s in range(1, 9))
    objective = nn.Dropout()
    modes = []
    score = score_dev(lambda _: modes.append(objective.training) or 42, None, objective)
    assert score == 42.0 and modes == [False] and objective.training is True
