"""Multilingual knowledge distillation (Reimers & Gurevych, 2020, "Making Monolingual
Sentence Embeddings Multilingual using Knowledge Distillation"), and its contrastive
variant `infonce-distill`.

A frozen teacher, the starting model as it was before training, embeds the source
sentence; the student learns to map the source and its translation onto that vector:
MSE(student(a), teacher(source)) + MSE(student(b), teacher(source)).
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn
from viewmill.train.distributed import gather_with_local_grad
from viewmill.train.layout import BatchLayout
from viewmill.train.objectives import batch_negatives, with_hard_negatives
from viewmill.train.pooling import exported_modules, mean_pooled


class Distill(nn.Module):
    """The student (trained, exported with mean pooling) and a frozen copy of it, the teacher
    (eval mode, no gradients, in no optimiser, never exported)."""

    def __init__(self, encoder: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder
        self.teacher = copy.deepcopy(encoder).requires_grad_(False).eval()

    def train(self, mode: bool = True) -> Distill:
        super().train(mode)
        self.teacher.eval()  # the teacher always runs without dropout
        return self

    def sentence_embedding(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The student's mean-pooled output, un-normalised: what the exported model computes."""
        return mean_pooled(self.encoder, batch)

    def teacher_embedding(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        with torch.no_grad():
            return mean_pooled(self.teacher, batch)

    def loss(
        self, batch: dict[str, torch.Tensor], n: int, *, train_encoder: bool = True, layout: BatchLayout | None = None
    ) -> torch.Tensor:
        """The paper's loss over both views; the source is the batch's source rows, else view a."""
        layout = layout or BatchLayout(n)
        student = self.sentence_embedding({k: v[: 2 * n] for k, v in batch.items()})
        target = self.teacher_embedding({k: v[layout.source] for k, v in batch.items()})
        # sentence-transformers' MSELoss averages over both views; the paper sums the two terms.
        return F.mse_loss(student[layout.a], target) + F.mse_loss(student[layout.b], target)

    forward = loss

    def head_parameters(self) -> list[nn.Parameter]:
        return []


def symmetric_info_nce(
    a: torch.Tensor, b: torch.Tensor, temperature: float, negatives: torch.Tensor | None = None, weight: float = 0.0,
    present: torch.Tensor | None = None,
) -> torch.Tensor:  # fmt: skip
    """In-batch InfoNCE in both directions: a_i against every b_j (and every hard negative of
    the batch, as supervised SimCSE: the negatives are candidates for view a's anchors only),
    and b_i against every a_j."""
    anchors = F.normalize(a, dim=-1)
    logits = anchors @ F.normalize(b, dim=-1).T / temperature
    targets = torch.arange(a.shape[0], device=a.device)
    forward = with_hard_negatives(logits, anchors, negatives, temperature, weight, a.shape[0], present)
    return (F.cross_entropy(forward, targets) + F.cross_entropy(logits.T, targets)) / 2


class AnchoredContrastive(Distill):
    """Symmetric InfoNCE between the views plus `weight` x MSE(student(source), teacher(source)).

    The contrastive term pulls a translation onto its source and keeps the batch's other
    sentences apart (so same-language similarity keeps its spread, where plain MSE
    distillation from a small parallel set flattens it); the anchor holds the source
    language where the start model had it (its STS stays)."""

    def __init__(
        self, encoder: nn.Module, temperature: float, weight: float, hard_negative_weight: float = 0.0
    ) -> None:
        super().__init__(encoder)
        self.temperature, self.weight = temperature, weight
        self.hard_negative_weight = hard_negative_weight

    def loss(
        self, batch: dict[str, torch.Tensor], n: int, *, train_encoder: bool = True, layout: BatchLayout | None = None
    ) -> torch.Tensor:
        layout = layout or BatchLayout(n)
        views = self.sentence_embedding({k: v[: layout.negatives.stop] for k, v in batch.items()})
        rows = {k: v[layout.source] for k, v in batch.items()}
        source = self.sentence_embedding(rows) if layout.sources else views[layout.a]
        a, b = gather_with_local_grad(views[layout.a]), gather_with_local_grad(views[layout.b])
        negatives, present = batch_negatives(views, layout)
        contrast = symmetric_info_nce(a, b, self.temperature, negatives, self.hard_negative_weight, present)
        return contrast + self.weight * F.mse_loss(source, self.teacher_embedding(rows))

    forward = loss


def build_distill(config, sentence_model) -> tuple[nn.Module, list[nn.Module]]:
    """The student over the base model, exported with mean pooling (the teacher is a frozen copy
    inside the module, never exported)."""
    return Distill(sentence_model[0].auto_model), exported_modules(sentence_model)


def build_anchored(config, sentence_model) -> tuple[nn.Module, list[nn.Module]]:
    """The anchored student over the base model, exported with mean pooling."""
    weight = config.objective_options.distill_weight
    model = AnchoredContrastive(sentence_model[0].auto_model, config.temperature, weight, config.hard_negative_weight)
    return model, exported_modules(sentence_model)
