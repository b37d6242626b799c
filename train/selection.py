"""Dev scoring during training and the choice of the exported weights: the best dev-scored
state (the start included) and early stopping."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from viewmill.train.checkpoints import Checkpoints, RunState
from viewmill.train.config import TrainConfig

DevScore = Callable[[object], float]  # a SentenceTransformer in, STS-B dev Spearman x100 out


def score_dev(dev: DevScore, exported, objective: nn.Module) -> float:
    """The exported model's dev score, in eval mode; training mode again after."""
    objective.eval()
    try:
        with torch.no_grad():
            return float(dev(exported))
    finally:
        objective.train()


def evaluates_at(config: TrainConfig, step: int) -> bool:
    return bool(config.eval_every) and step % config.eval_every == 0


def patience_spent(config: TrainConfig, state: RunState) -> bool:
    """Whether `early_stopping_patience` evaluations went by without a better dev score."""
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
