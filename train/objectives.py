"""Training objectives besides BSL and distillation: NT-Xent and InfoNCE contrastive,
SG-OPT, IS-BERT, and the objective registry.

Each takes a tokenised batch whose first n rows are view a and next n rows view b (the
layout `viewmill.train.loop` builds; objectives whose entry reads hard negatives or the
source sentence also get the rows after those, described by a `BatchLayout`), returns a
scalar loss, and names the parameters that are trained and the sentence-transformers
modules that are exported.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from viewmill.storage.extension_points import Registry, RegistryError
from viewmill.train import modeling_isbert
from viewmill.train.bsl import ema_step, mean_pool
from viewmill.train.distributed import gather_with_local_grad
from viewmill.train.layout import BatchLayout
from viewmill.train.legacy_isbert import ReLUCNN  # noqa: F401  (the class path of IS-BERT exports before 0.2)


def nt_xent(
    a: torch.Tensor,
    b: torch.Tensor,
    temperature: float,
    negatives: torch.Tensor | None = None,
    hard_negative_weight: float = 0.0,
) -> torch.Tensor:
    """SimCLR's loss: 2n views; each view's positive is its partner and the other 2(n-1)
    views are its negatives (itself excluded). Hard `negatives` (n*k rows, pair i's at
    i*k..i*k+k-1) join every view's candidates."""
    z = F.normalize(torch.cat([a, b]), dim=-1)
    n = a.shape[0]
    logits = z @ z.T / temperature
    logits = logits.masked_fill(torch.eye(2 * n, dtype=torch.bool, device=z.device), float("-inf"))
    logits = _with_negatives(logits, z, negatives, temperature, hard_negative_weight, n)
    targets = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)]).to(z.device)
    return F.cross_entropy(logits, targets)


def info_nce(
    a: torch.Tensor,
    b: torch.Tensor,
    temperature: float,
    negatives: torch.Tensor | None = None,
    hard_negative_weight: float = 0.0,
) -> torch.Tensor:
    """One-directional in-batch negatives (multiple negatives ranking): a_i against every b_j
    and every hard negative of the batch (n*k rows, pair i's at i*k..i*k+k-1), as
    sentence-transformers' MultipleNegativesRankingLoss and supervised SimCSE."""
    anchors = F.normalize(a, dim=-1)
    logits = anchors @ F.normalize(b, dim=-1).T / temperature
    logits = _with_negatives(logits, anchors, negatives, temperature, hard_negative_weight, a.shape[0])
    return F.cross_entropy(logits, torch.arange(a.shape[0], device=a.device))


def _with_negatives(
    logits: torch.Tensor, anchors: torch.Tensor, negatives: torch.Tensor | None, temperature: float, weight: float,
    n: int,
) -> torch.Tensor:  # fmt: skip
    """`logits` with the (normalised) anchors' logits against the hard negatives appended;
    SimCSE's `weight` is added to each anchor's own pair's negatives (anchor r is pair r mod n)."""
    if negatives is None:
        return logits
    extra = anchors @ F.normalize(negatives, dim=-1).T / temperature
    if weight:
        k = negatives.shape[0] // n
        own_pair = torch.arange(negatives.shape[0], device=extra.device) // k
        own = own_pair.unsqueeze(0) == (torch.arange(anchors.shape[0], device=extra.device) % n).unsqueeze(1)
        extra = extra + weight * own.to(extra.dtype)
    return torch.cat([logits, extra], dim=1)


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
        negatives = gather_with_local_grad(z[layout.negatives]) if layout.k else None
        a, b = gather_with_local_grad(z[layout.a]), gather_with_local_grad(z[layout.b])
        return fn(a, b, self.temperature, negatives, self.hard_negative_weight)

    def loss(
        self, batch: dict[str, torch.Tensor], n: int, *, train_encoder: bool = True, layout: BatchLayout | None = None
    ) -> torch.Tensor:
        return self.pair_loss(self.embed(batch), layout or BatchLayout(n))

    forward = loss
    gathers_negatives = True

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


def masked_max_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    return hidden.masked_fill(~attention_mask.bool().unsqueeze(-1), float("-inf")).amax(dim=1)


class SGOPT(nn.Module):
    """Self-guided contrastive learning (Kim et al., 2021), L_opt3 with the regulariser.

    BERT_T (trained, layer 0 frozen) gives c_i = [CLS] of its last layer; the frozen copy
    BERT_F gives a view per layer, h_{i,k} = max pooling of layer k (k = 0..l). With
    `fixed_reads_partner`, BERT_F reads the partner view (BT + SG-OPT); otherwise the
    sentence itself.
    """

    def __init__(
        self,
        encoder: nn.Module,
        dim: int,
        *,
        temperature: float = 0.01,
        reg_lambda: float = 0.1,
        head_width: int = 4096,
        fixed_reads_partner: bool = False,
    ) -> None:
        super().__init__()
        self.tuned = encoder
        self.fixed = copy.deepcopy(encoder).requires_grad_(False).eval()
        self.tuned.get_input_embeddings().requires_grad_(False)
        embeddings = getattr(encoder, "embeddings", None)
        if embeddings is not None:  # layer 0 is the whole embedding block (positions, norm) in BERT
            embeddings.requires_grad_(False)
        # Two linear layers, each followed by GELU (the paper's footnote 4).
        self.head = nn.Sequential(nn.Linear(dim, head_width), nn.GELU(), nn.Linear(head_width, dim), nn.GELU())
        self.temperature, self.reg_lambda, self.fixed_reads_partner = temperature, reg_lambda, fixed_reads_partner

    def train(self, mode: bool = True) -> SGOPT:
        super().train(mode)
        self.fixed.eval()
        return self

    def sentence_embedding(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """c_i: BERT_T's last-layer [CLS], the vector the loss trains (the head is training-only)."""
        return self.tuned(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state[:, 0]

    def layer_views(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """(n, l+1, d): max-pooled hidden states of every BERT_F layer, embeddings included."""
        with torch.no_grad():
            out = self.fixed(
                input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], output_hidden_states=True
            )
            mask = batch["attention_mask"]
            return torch.stack([masked_max_pool(h, mask) for h in out.hidden_states], dim=1)

    def loss(self, batch: dict[str, torch.Tensor], n: int, *, train_encoder: bool = True) -> torch.Tensor:
        rows = {k: v[:n] for k, v in batch.items()}
        fixed_rows = {k: v[n:] for k, v in batch.items()} if self.fixed_reads_partner else rows
        with torch.set_grad_enabled(train_encoder and torch.is_grad_enabled()):
            c = self.tuned(input_ids=rows["input_ids"], attention_mask=rows["attention_mask"]).last_hidden_state[:, 0]
        h = self.layer_views(fixed_rows)
        loss = opt3(self.head(c), self.head(h), self.temperature)
        return loss + self.reg_lambda * self.regulariser() if self.reg_lambda else loss

    forward = loss

    def regulariser(self) -> torch.Tensor:
        """||theta_T - theta_F||^2 over every parameter of the two copies."""
        diffs = torch._foreach_sub(list(self.tuned.parameters()), list(self.fixed.parameters()))
        return torch.stack([(d.float() ** 2).sum() for d in diffs]).sum()

    def head_parameters(self) -> list[nn.Parameter]:
        return list(self.head.parameters())


def opt3(c: torch.Tensor, h: torch.Tensor, temperature: float) -> torch.Tensor:
    """L_opt3 averaged over sentences i and layers k: c_i against its own view h_{i,k}, with
    every view of every other sentence in the denominator.

    c: (n, d) projected sentence vectors; h: (n, L, d) projected layer views.
    """
    n = h.shape[0]
    c = F.normalize(c, dim=-1)
    h = F.normalize(h, dim=-1)
    sim = torch.einsum("id,mkd->imk", c, h) / temperature  # (n, n, L)
    own = sim[torch.arange(n), torch.arange(n)]  # (n, L)
    others = sim.masked_fill(torch.eye(n, dtype=torch.bool, device=c.device).unsqueeze(-1), float("-inf"))
    negatives = torch.logsumexp(others.reshape(n, -1), dim=-1, keepdim=True)  # (n, 1)
    return (torch.logaddexp(own, negatives) - own).mean()


def jsd_mi_loss(global_: torch.Tensor, local: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Negative Jensen-Shannon MI estimate between each sentence and its own tokens
    (positives) against the tokens of the other sentences in the batch (negatives).

    global_: (n, d); local: (n, T, d); mask: (n, T) of real tokens.
    """
    n = global_.shape[0]
    scores = torch.einsum("id,jtd->ijt", global_, local)  # discriminator: dot product
    valid = mask.bool().unsqueeze(0).expand(n, -1, -1)
    same = torch.eye(n, dtype=torch.bool, device=scores.device).unsqueeze(-1)
    positive, negative = valid & same, valid & ~same
    log2 = math.log(2.0)
    e_pos = (log2 - F.softplus(-scores))[positive].mean()
    e_neg = (F.softplus(-scores) + scores - log2)[negative].mean()
    return e_neg - e_pos


class ISBERT(nn.Module):
    """IS-BERT (Zhang et al., 2020): CNN n-gram features over the encoder's tokens, the
    sentence as their mean over time, trained to maximise JSD mutual information between
    a sentence and its own n-grams. Reads view a only: a sentence's other view in the
    same batch would be a near-duplicate negative."""

    def __init__(self, encoder: nn.Module, dim: int, filters: int = 256, windows: tuple[int, ...] = (1, 3, 5)) -> None:
        super().__init__()
        self.encoder = encoder
        self.cnn = modeling_isbert.ReLUCNN(dim, filters, windows)

    def local_features(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        tokens = self.encoder(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
        return self.cnn({"token_embeddings": tokens, "attention_mask": batch["attention_mask"]})["token_embeddings"]

    def sentence_embedding(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The sentence vector training shapes: the mean of the n-gram features over real tokens."""
        return mean_pool(self.local_features(batch), batch["attention_mask"])

    def loss(self, batch: dict[str, torch.Tensor], n: int, *, train_encoder: bool = True) -> torch.Tensor:
        mask = batch["attention_mask"][:n]
        with torch.set_grad_enabled(train_encoder and torch.is_grad_enabled()):
            tokens = self.encoder(input_ids=batch["input_ids"][:n], attention_mask=mask).last_hidden_state
        local = self.cnn({"token_embeddings": tokens, "attention_mask": mask})["token_embeddings"]
        return jsd_mi_loss(mean_pool(local, mask), local, mask)

    forward = loss

    def head_parameters(self) -> list[nn.Parameter]:
        return list(self.cnn.parameters())


# -- the objective registry ------------------------------------------------------------


@dataclass(frozen=True)
class Objective:
    """A training objective's registry entry; plugins add theirs in the entry-point group
    `viewmill.objectives`. `build(config, sentence_model)` returns the training module (with
    `loss(batch, n, train_encoder=...)` and `head_parameters()`) and the sentence-transformers
    modules to export; viewmill's own objectives leave it None and the training loop builds them.

    An entry with `negatives` or `needs_source` gets those rows after views a and b, and its
    module's loss takes them as a keyword, `layout=` (a `viewmill.train.layout.BatchLayout`);
    other entries get the plain [a..., b...] batch and no layout."""

    build: Callable[[Any, Any], tuple[nn.Module, list[nn.Module]]] | None = None
    head: bool = True  # a head that warms up before the encoder trains
    temperature: float | None = None  # default temperature, where the loss has one
    accumulation: bool = False  # grad_accumulation > 1 keeps the loss unchanged
    description: str = ""
    negatives: bool = False  # trains on hard negatives (a `negatives` column); others refuse pairs with them
    needs_source: bool = False  # reads the source sentence (a `text_source` column, else view a)
    # (module, config, step) after every optimiser step that trained the encoder: BSL's EMA
    after_step: Callable[[nn.Module, Any, int], None] | None = None


def _objective_entry(value: object) -> Objective:
    if not isinstance(value, Objective):
        raise RegistryError(f"an objective entry must be a viewmill.train.objectives.Objective, not {value!r}")
    return value


BSL_OBJECTIVE = Objective(
    head=True, accumulation=True, after_step=ema_step, description="BYOL-style bootstrapping (predictor + EMA)"
)
NTXENT = Objective(head=False, temperature=0.05, accumulation=True, negatives=True, description="NT-Xent over 2n views")
INFONCE = Objective(
    head=False, temperature=0.05, accumulation=True, negatives=True, description="in-batch InfoNCE (MNRL)"
)
SGOPT_OBJECTIVE = Objective(head=True, temperature=0.01, description="self-guided contrastive (frozen BERT_F)")
ISBERT_OBJECTIVE = Objective(head=True, description="mutual information with the sentence's n-grams")

OBJECTIVES: Registry[Objective] = Registry(
    "viewmill.objectives",
    "objective",
    {
        "bsl": "viewmill.train.objectives:BSL_OBJECTIVE",
        "ntxent": "viewmill.train.objectives:NTXENT",
        "infonce": "viewmill.train.objectives:INFONCE",
        "sgopt": "viewmill.train.objectives:SGOPT_OBJECTIVE",
        "isbert": "viewmill.train.objectives:ISBERT_OBJECTIVE",
        "distill": "viewmill.train.distill:DISTILL_OBJECTIVE",
        "infonce-distill": "viewmill.train.distill:INFONCE_DISTILL_OBJECTIVE",
    },
    check=_objective_entry,
)
