"""The optimiser and one training step (mixed precision, gradient accumulation, DDP)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable

import torch
from torch import nn
from viewmill.train import distributed
from viewmill.train.config import TrainConfig
from viewmill.train.layout import BatchLayout
from viewmill.train.objectives import OBJECTIVES, TrainingModule

AUTOCAST_DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def make_optimizer(config: TrainConfig, objective: TrainingModule) -> torch.optim.Optimizer:
    """The objective entry's optimiser over two parameter groups: the encoder at `encoder_lr`
    and, where the module has one, its head at `head_lr`."""
    head = objective.head_parameters()
    head_ids = {id(p) for p in head}
    encoder = [p for p in objective.parameters() if p.requires_grad and id(p) not in head_ids]
    groups = [{"params": encoder, "lr": config.encoder_lr, "name": "encoder"}]
    if head:
        groups.append({"params": head, "lr": config.head_lr, "name": "head"})
    return OBJECTIVES.get(config.objective).optimizer(groups)


def train_step(
    objective: nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: dict[str, torch.Tensor],
    n: int,
    *,
    train_encoder: bool,
    precision: str = "fp32",
    scaler: torch.amp.GradScaler | None = None,
    after_step: Callable[[], None] | None = None,
    accumulation: int = 1,
    layout: BatchLayout | None = None,
    cached_gradients: bool = False,
) -> float:
    """One optimiser step and, when the encoder trained and the step was taken, `after_step`
    (BSL's EMA update). `layout`: the batch's rows beyond views a and b (hard negatives,
    sources), passed on to the loss; None for a plain [a..., b...] batch. `cached_gradients`:
    the objective entry's (its module's loss is over in-batch negatives: a `CachedBackward`).

    With fp16 loss scaling an overflowing step is skipped by the scaler; BSL's target must
    then stay where it is, or it would drift towards weights that did not change.
    """
    dtype = AUTOCAST_DTYPES[precision]
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(batch["input_ids"].device.type, dtype=dtype, enabled=dtype is not None):
        loss = _backward(objective, batch, n, accumulation, train_encoder, scaler, layout, cached_gradients)
    if scaler is None:
        optimizer.step()
        stepped = True
    else:
        scale_before = scaler.get_scale()
        scaler.step(optimizer)
        scaler.update()
        stepped = scaler.get_scale() >= scale_before  # the scaler lowers its scale exactly when it skips
    if train_encoder and stepped and after_step is not None:
        after_step()
    return float(loss.detach())


def _backward(
    objective: nn.Module, batch: dict[str, torch.Tensor], n: int, accumulation: int, train_encoder: bool, scaler,
    layout: BatchLayout | None, gathers: bool,
) -> torch.Tensor:  # fmt: skip
    """The batch's loss with its gradients accumulated: cached (in-batch negatives), in
    plain pieces, or in one pass."""
    extra = {"layout": layout} if layout is not None else {}  # only objectives that read one get one
    inner = getattr(objective, "module", objective)  # under DistributedDataParallel
    world = distributed.world_size()
    # A loss over the global batch whose gradient flows only through this rank's rows is
    # scaled by the world size, so that DDP's average is the single-process gradient.
    scale = world if gathers and world > 1 else 1
    if accumulation > 1 and gathers:
        with _no_sync(objective):
            loss = inner.cached_backward(batch, n, accumulation, scale, **extra)
        distributed.average_gradients(inner)
        return loss
    if accumulation > 1:
        return _accumulated_backward(objective, batch, n, accumulation, train_encoder, scaler, layout)
    loss = objective(batch, n, train_encoder=train_encoder, **extra)
    (scaler.scale(loss * scale) if scaler is not None else loss * scale).backward()
    return loss


def _no_sync(model: nn.Module):
    """DDP's no_sync for backward passes that do not go through its forward (synced by hand)."""
    return model.no_sync() if hasattr(model, "no_sync") else contextlib.nullcontext()


def _accumulated_backward(
    model: nn.Module, batch: dict[str, torch.Tensor], n: int, pieces: int, train_encoder: bool, scaler,
    layout: BatchLayout | None,
) -> torch.Tensor:  # fmt: skip
    """Plain accumulation (BSL, distillation: no in-batch negatives): each piece's loss
    weighted by its share of the pairs; DDP syncs gradients on the last piece only."""
    size = math.ceil(n / pieces)
    total = torch.zeros(())
    starts = list(range(0, n, size))
    for i, start in enumerate(starts):
        pairs = list(range(start, min(start + size, n)))
        rows, piece_layout = (layout or BatchLayout(n)).take(pairs)
        piece = {k: v[rows] for k, v in batch.items()}
        extra = {"layout": piece_layout} if layout is not None else {}
        sync = contextlib.nullcontext() if i == len(starts) - 1 else _no_sync(model)
        with sync:
            loss = model(piece, len(pairs), train_encoder=train_encoder, **extra) * (len(pairs) / n)
            (scaler.scale(loss) if scaler is not None else loss).backward()
        total = total + loss.detach().float().cpu()
    return total
