"""BSL: bootstrapped sentence representation learning (BYOL for sentences).

Online encoder f + predictor p learn to predict a target encoder's embedding of the other
view; the target is an exponential moving average of the online encoder, without gradients.
"""

from __future__ import annotations

import copy
import math
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn


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


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)


def mean_pooled(encoder: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The encoder's mean-pooled last hidden state: what the exported models compute."""
    out = encoder(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    return mean_pool(out.last_hidden_state, batch["attention_mask"])


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


class MomentumSchedule(Protocol):
    """The settings BSL's target momentum reads (a `TrainConfig`)."""

    momentum: float
    momentum_schedule: str
    steps: int


def target_momentum(config: MomentumSchedule, step: int) -> float:
    """BSL's EMA momentum at `step` (1-based): constant, or BYOL's cosine increase from
    `momentum` at the first step to 1 at the last."""
    if config.momentum_schedule == "constant" or config.steps <= 1:
        return config.momentum
    progress = (step - 1) / (config.steps - 1)
    return 1 - (1 - config.momentum) * (math.cos(math.pi * progress) + 1) / 2


def ema_step(model: BSL, config: MomentumSchedule, step: int) -> None:
    """BSL's after-step hook: the target follows the online encoder at the step's momentum."""
    model.update_target(target_momentum(config, step))
