"""BSL: bootstrapped sentence representation learning (BYOL for sentences); its settings and
registry entry are torch-free (`objective_options`, `objective_catalog`).

Online encoder f + predictor p learn to predict a target encoder's embedding of the other
view; the target is an exponential moving average of the online encoder, without gradients.
"""

from __future__ import annotations

import copy
import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn
from viewmill.train.objective_options import BSLOptions
from viewmill.train.pooling import exported_modules, mean_pooled

if TYPE_CHECKING:
    from viewmill.train.config import TrainConfig


class Predictor(nn.Module):
    """MLP d -> k*d -> k*d -> d with batch norm and ReLU on the hidden layers."""

    def __init__(self, dim: int, k: int = 8) -> None:
        super().__init__()
        hidden = k * dim
        self.net = nn.Sequential(
            nn.Linear(dim, hidden),
            nn.BatchNorm1d(hidden),
            nn.ReLU(inplace=True),
            nn.Linear(hidden, hidden),
            nn.BatchNorm1d(hidden),
            nn.ReLU(inplace=True),
            nn.Linear(hidden, dim),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def negative_cosine(prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """2 - 2 cos, averaged over the batch (BYOL's normalised MSE)."""
    return (2 - 2 * F.cosine_similarity(prediction, target.detach(), dim=-1)).mean()


class BSL(nn.Module):
    def __init__(self, encoder: nn.Module, dim: int, k: int = 8) -> None:
        super().__init__()
        self.online = encoder
        self.predictor = Predictor(dim, k)
        self.target = copy.deepcopy(encoder)
        self.target.requires_grad_(False)
        self.target.eval()

    def train(self, mode: bool = True) -> BSL:
        super().train(mode)
        self.target.eval()  # the target always runs without dropout
        return self

    embed = staticmethod(mean_pooled)

    def sentence_embedding(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The online encoder's mean-pooled output: what inference uses."""
        return self.embed(self.online, batch)

    def loss(self, batch: dict[str, torch.Tensor], n: int, *, train_encoder: bool = True) -> torch.Tensor:
        """Symmetric BSL loss for a tokenised batch whose first n rows are view a, last n view b."""
        with torch.set_grad_enabled(train_encoder and torch.is_grad_enabled()):
            online = self.embed(self.online, batch)
        with torch.no_grad():
            target = self.embed(self.target, batch)
        pred_a, pred_b = self.predictor(online[:n]), self.predictor(online[n:])
        return 0.5 * negative_cosine(pred_a, target[n:]) + 0.5 * negative_cosine(pred_b, target[:n])

    def forward(self, batch: dict[str, torch.Tensor], n: int, *, train_encoder: bool = True) -> torch.Tensor:
        return self.loss(batch, n, train_encoder=train_encoder)

    def head_parameters(self) -> list[nn.Parameter]:
        return list(self.predictor.parameters())

    @torch.no_grad()
    def update_target(self, momentum: float) -> None:
        """xi <- m*xi + (1-m)*theta, one fused call over all parameters."""
        target_params = list(self.target.parameters())
        online_params = list(self.online.parameters())
        torch._foreach_lerp_(target_params, online_params, 1.0 - momentum)
        for t_buf, o_buf in zip(self.target.buffers(), self.online.buffers(), strict=True):
            t_buf.copy_(o_buf)


def target_momentum(options: BSLOptions, steps: int, step: int) -> float:
    """BSL's EMA momentum at `step` (1-based) of `steps`: constant, or BYOL's cosine increase
    from `momentum` at the first step to 1 at the last."""
    if options.momentum_schedule == "constant" or steps <= 1:
        return options.momentum
    progress = (step - 1) / (steps - 1)
    return 1 - (1 - options.momentum) * (math.cos(math.pi * progress) + 1) / 2


def ema_step(model: BSL, config: TrainConfig, step: int) -> None:
    """BSL's after-step hook: the target follows the online encoder at the step's momentum."""
    model.update_target(target_momentum(config.objective_options, config.steps, step))


def build(config: TrainConfig, sentence_model) -> tuple[nn.Module, list[nn.Module]]:
    """BSL over the base model, exported as the online encoder with mean pooling."""
    dim = sentence_model.get_embedding_dimension()
    model = BSL(sentence_model[0].auto_model, dim, config.objective_options.predictor_k)
    return model, exported_modules(sentence_model)
