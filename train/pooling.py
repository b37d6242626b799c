"""Pooling the objectives share, and the sentence-transformers modules an objective exports
(the base model's transformer, the pooling its loss trains, the base's Normalize)."""

from __future__ import annotations

import torch
from torch import nn


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)


def mean_pooled(encoder: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The encoder's mean-pooled last hidden state: what the exported models compute."""
    out = encoder(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    return mean_pool(out.last_hidden_state, batch["attention_mask"])


def masked_max_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    return hidden.masked_fill(~attention_mask.bool().unsqueeze(-1), float("-inf")).amax(dim=1)


def exported_modules(sentence_model, pooling: str = "mean") -> list[nn.Module]:
    """The modules to export beside a training module sharing the base's transformer: `pooling`
    is the one the loss trains, whatever the base had (its own pooling and Dense layers are
    dropped); its Normalize is kept (cosines do not change)."""
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling

    tail = [m for m in list(sentence_model)[1:] if isinstance(m, Normalize)]
    return [sentence_model[0], Pooling(sentence_model.get_embedding_dimension(), pooling_mode=pooling), *tail]
