"""Dev scoring during training and the choice of the exported weights: the best dev-scored
state (the start included) under the selection rule, and early stopping."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from viewmill.train.checkpoints import Checkpoints, RunState
from viewmill.train.config import TrainConfig
from viewmill.train.dev_scores import DevResult

# A SentenceTransformer in; each dev task's Spearman x100 and their weighted mean out. A plain
# float is one task's score (named "dev"), as a one-task scorer returned before.
DevScore = Callable[[object], DevResult | float]


def score_dev(dev: DevScore, exported, objective: nn.Module) -> DevResult:
    """The exported model's dev scores, in eval mode; training mode again after."""
    objective.eval()
    try:
        with torch.no_grad():
            result = dev(exported)
    finally:
        objective.train()
    if isinstance(result, DevResult):
        return result
    return DevResult({"dev": float(result)}, float(result))


def record_dev(
    config: TrainConfig, state: RunState, step: int, result: DevResult, exported, checkpoints: Checkpoints
) -> None:
    """Record the evaluation of `step` (0: the start); the selection rule decides whether the
    state may become the best: the start always may."""
    accepted = step == 0 or config.selection.accepts(state.task_scores_at(0), result.scores)
    state.record(step, result, exported, checkpoints, accepted=accepted)


def evaluates_at(config: TrainConfig, step: int) -> bool:
    return bool(config.eval_every) and step % config.eval_every == 0


def patience_spent(config: TrainConfig, state: RunState) -> bool:
    """Whether `early_stopping_patience` evaluations went by without a better selection score
    (a state the rule refuses is no improvement)."""
    patience = config.early_stopping_patience
    return patience is not None and state.evals_since_best() >= patience


def select_weights(config: TrainConfig, state: RunState, exported, checkpoints: Checkpoints) -> int:
    """The step whose weights are exported (0: the starting model); with `keep_best`, the best
    dev-scored weights are loaded into `exported` when training went past them."""
    if not (config.eval_every and config.keep_best):
        return state.step
    if state.best_step != state.step:
        exported.load_state_dict(checkpoints.best_weights())
    return state.best_step
