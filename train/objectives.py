"""What an objective's `build` returns to train, a `TrainingModule` (the contract below), and
the contrastive objectives NT-Xent and InfoNCE; BSL, SG-OPT, IS-BERT and distillation have
their own modules. The entries (`Objective`) and the registry are torch-free, in
`objective_entry` and `objective_catalog`; plugins may import them from here too.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import torch
import torch.nn.functional as F
from torch import nn
from viewmill.train.distributed import gather_with_local_grad
from viewmill.train.layout import BatchLayout
from viewmill.train.legacy_isbert import ReLUCNN  # noqa: F401  (the class path of IS-BERT exports before 0.2)
from viewmill.train.objective_catalog import INFONCE, NTXENT, OBJECTIVES  # noqa: F401  (imported from here)
from viewmill.train.objective_entry import NoOptions, Objective, paper_citation  # noqa: F401  (plugins import them here)
from viewmill.train.pooling import exported_modules, mean_pool

from viewmill.registry import RegistryError


@runtime_checkable
class TrainingModule(Protocol):
    """What an objective's `build` returns to train: a `torch.nn.Module` whose call is the loss.

    The batch is tokenised; its first n rows are view a and the next n view b (the layout
    `viewmill.train.batches` builds). An entry with `negatives` or `needs_source` also gets
    the rows after those and `layout=` (a `BatchLayout` saying where they are); other entries
    get the plain [a..., b...] batch and no layout, so a module that reads none need not take
    one. The module's parameters not in `head_parameters()` are the encoder's.
    """

    def forward(
        self, batch: dict[str, torch.Tensor], n: int, *, train_encoder: bool = True, layout: BatchLayout | None = None
    ) -> torch.Tensor:
        """The scalar loss of the batch; `train_encoder` False during the head's warm-up."""
        ...

    def head_parameters(self) -> list[nn.Parameter]:
        """The head's parameters (trained at `head_lr`, warmed up first); [] without a head."""
        ...


@runtime_checkable
class CachedBackward(TrainingModule, Protocol):
    """The module of an entry with `cached_gradients`: its loss is over in-batch negatives, so
    accumulation re-embeds (GradCache) rather than splitting the loss, and under torchrun its
    loss is over every rank's rows (scaled by the world size)."""

    def cached_backward(
        self, batch: dict[str, torch.Tensor], n: int, chunks: int, scale: float = 1.0, layout: BatchLayout | None = None
    ) -> torch.Tensor:
        """Back-propagates the whole batch's loss x `scale` embedding it in `chunks` pieces;
        returns the loss (detached)."""
        ...


def checked_module(name: str, entry: Objective, module: object) -> TrainingModule:
    """`module` as built by objective `name`, refused where it breaks the contract its entry
    states (a plugin's mistake, named before training starts)."""
    if not isinstance(module, nn.Module) or not isinstance(module, TrainingModule):
        raise RegistryError(
            f"objective {name}'s build returned {type(module).__name__}, not a torch.nn.Module with forward(batch, n, "
            "*, train_encoder) and head_parameters() (viewmill.train.objectives.TrainingModule): fix the plugin"
        )
    if entry.cached_gradients and not isinstance(module, CachedBackward):
        raise RegistryError(
            f"objective {name}'s entry sets cached_gradients but its module {type(module).__name__} has no "
            "cached_backward(batch, n, chunks, scale, layout) (viewmill.train.objectives.CachedBackward): add it, "
            "or set cached_gradients=False"
        )
    return module


def nt_xent(
    a: torch.Tensor,
    b: torch.Tensor,
    temperature: float,
    negatives: torch.Tensor | None = None,
    hard_negative_weight: float = 0.0,
    present: torch.Tensor | None = None,
) -> torch.Tensor:
    """SimCLR's loss: 2n views; each view's positive is its partner and the other 2(n-1)
    views are its negatives (itself excluded). Hard `negatives` (n*k rows, pair i's at
    i*k..i*k+k-1; `present` masks the slots of pairs without any) join every view's candidates."""
    z = F.normalize(torch.cat([a, b]), dim=-1)
    n = a.shape[0]
    logits = z @ z.T / temperature
    logits = logits.masked_fill(torch.eye(2 * n, dtype=torch.bool, device=z.device), float("-inf"))
    logits = with_hard_negatives(logits, z, negatives, temperature, hard_negative_weight, n, present)
    targets = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)]).to(z.device)
    return F.cross_entropy(logits, targets)


def info_nce(
    a: torch.Tensor,
    b: torch.Tensor,
    temperature: float,
    negatives: torch.Tensor | None = None,
    hard_negative_weight: float = 0.0,
    present: torch.Tensor | None = None,
) -> torch.Tensor:
    """One-directional in-batch negatives (multiple negatives ranking): a_i against every b_j
    and every hard negative of the batch (n*k rows, pair i's at i*k..i*k+k-1; `present` masks
    the slots of pairs without any), as sentence-transformers' MultipleNegativesRankingLoss
    and supervised SimCSE."""
    anchors = F.normalize(a, dim=-1)
    logits = anchors @ F.normalize(b, dim=-1).T / temperature
    n = a.shape[0]
    logits = with_hard_negatives(logits, anchors, negatives, temperature, hard_negative_weight, n, present)
    return F.cross_entropy(logits, torch.arange(a.shape[0], device=a.device))


def with_hard_negatives(
    logits: torch.Tensor, anchors: torch.Tensor, negatives: torch.Tensor | None, temperature: float, weight: float,
    n: int, present: torch.Tensor | None = None,
) -> torch.Tensor:  # fmt: skip
    """`logits` with the (normalised) anchors' logits against the hard negatives appended;
    SimCSE's `weight` is added to each anchor's own pair's negatives (anchor r is pair r mod n).
    `present` (bool, one per negative slot): the slots of pairs without negatives are no
    candidates (-inf), so each anchor meets exactly the negatives the batch has."""
    if negatives is None:
        return logits
    extra = anchors @ F.normalize(negatives, dim=-1).T / temperature
    if weight:
        k = negatives.shape[0] // n
        own_pair = torch.arange(negatives.shape[0], device=extra.device) // k
        own = own_pair.unsqueeze(0) == (torch.arange(anchors.shape[0], device=extra.device) % n).unsqueeze(1)
        extra = extra + weight * own.to(extra.dtype)
    if present is not None:
        extra = extra.masked_fill(~present.unsqueeze(0), float("-inf"))
    return torch.cat([logits, extra], dim=1)


def batch_negatives(z: torch.Tensor, layout: BatchLayout) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The batch's hard negatives from its embeddings `z`, gathered over every rank: n*k rows
    (pair i's at i*k..i*k+k-1) and, where only some pairs carry them (`layout.holders`), which
    slots hold one (the others are zero rows). None, None: the batch has no negative rows.

    Every rank gathers the same n*k rows whichever of its pairs hold negatives, so the
    collective calls match across ranks."""
    if not layout.k:
        return None, None
    rows = z[layout.negatives]
    if layout.holders is None:
        return gather_with_local_grad(rows), None
    slots = torch.tensor(layout.negative_slots(), dtype=torch.long, device=z.device)
    dense = rows.new_zeros(layout.n * layout.k, rows.shape[-1]).index_copy(0, slots, rows)
    present = torch.zeros(layout.n * layout.k, dtype=rows.dtype, device=z.device).index_fill(0, slots, 1.0)
    return gather_with_local_grad(dense), gather_with_local_grad(present) > 0


class Contrastive(nn.Module):
    """A mean-pooled encoder trained with NT-Xent or InfoNCE on (a, b) pairs and, where the
    batch has them (its `BatchLayout`), the pairs' hard negatives."""

    def __init__(
        self, encoder: nn.Module, loss: str = "ntxent", temperature: float = 0.05, hard_negative_weight: float = 0.0
    ) -> None:
        super().__init__()
        if loss not in ("ntxent", "infonce"):
            raise ValueError(f"contrastive loss '{loss}' is not ntxent or infonce")
        self.encoder, self.kind, self.temperature = encoder, loss, temperature
        self.hard_negative_weight = hard_negative_weight

    def embed(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        out = self.encoder(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        return mean_pool(out.last_hidden_state, batch["attention_mask"])

    sentence_embedding = embed

    def pair_loss(self, z: torch.Tensor, layout: BatchLayout) -> torch.Tensor:
        """The loss over a batch's embeddings `z` (rows as `layout` says)."""
        fn = nt_xent if self.kind == "ntxent" else info_nce
        # Under torchrun every rank's pairs (and negatives) are negatives too: the loss is over the global batch.
        negatives, present = batch_negatives(z, layout)
        a, b = gather_with_local_grad(z[layout.a]), gather_with_local_grad(z[layout.b])
        return fn(a, b, self.temperature, negatives, self.hard_negative_weight, present)

    def loss(
        self, batch: dict[str, torch.Tensor], n: int, *, train_encoder: bool = True, layout: BatchLayout | None = None
    ) -> torch.Tensor:
        return self.pair_loss(self.embed(batch), layout or BatchLayout(n))

    forward = loss

    def cached_backward(
        self, batch: dict[str, torch.Tensor], n: int, chunks: int, scale: float = 1.0, layout: BatchLayout | None = None
    ) -> torch.Tensor:
        """Gradient accumulation that keeps every negative (GradCache, Gao et al. 2021).

        Embeds the batch (every row: views and hard negatives) in `chunks` pieces without a
        graph, takes the loss and its gradient with respect to the embeddings over the whole
        batch, then re-embeds each piece with a graph (same dropout: its random state is
        replayed) and back-propagates the cached gradient. Memory is one piece's
        activations; the gradient equals the whole batch's. Returns the loss.
        """
        layout = layout or BatchLayout(n)
        size = math.ceil(layout.rows / chunks)
        pieces = [list(range(start, min(start + size, layout.rows))) for start in range(0, layout.rows, size)]
        states, parts = [], []
        with torch.no_grad():
            for rows in pieces:
                states.append(_rng_state())
                parts.append(self.embed({k: v[rows] for k, v in batch.items()}))
        z = torch.cat(parts).detach().requires_grad_(True)
        loss = self.pair_loss(z, layout)
        (loss * scale).backward()
        cached = z.grad
        for rows, state in zip(pieces, states, strict=True):
            _set_rng_state(state)
            again = self.embed({k: v[rows] for k, v in batch.items()})
            again.backward(cached[rows[0] : rows[-1] + 1])
        return loss.detach()

    def head_parameters(self) -> list[nn.Parameter]:
        return []


def _rng_state() -> tuple:
    return torch.get_rng_state(), torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None


def _set_rng_state(state: tuple) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state_all(state[1])


def _contrastive(kind: str) -> Callable[[Any, Any], tuple[nn.Module, list[nn.Module]]]:
    def build(config, sentence_model) -> tuple[nn.Module, list[nn.Module]]:
        module = Contrastive(sentence_model[0].auto_model, kind, config.temperature, config.hard_negative_weight)
        return module, exported_modules(sentence_model)

    return build


build_ntxent, build_infonce = _contrastive("ntxent"), _contrastive("infonce")
