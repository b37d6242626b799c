"""SG-OPT: self-guided contrastive learning (Kim et al., 2021); its settings and registry entry are
torch-free (`objective_options`, `objective_catalog`)."""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn
from viewmill.train.pooling import exported_modules, masked_max_pool


class SGOPT(nn.Module):
    """Self-guided contrastive learning, L_opt3 with the regulariser.

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


def build(config, sentence_model) -> tuple[nn.Module, list[nn.Module]]:
    """SG-OPT over the base model, exported as BERT_T's [CLS] (c_i, what the loss trains)."""
    options = config.objective_options
    model = SGOPT(
        sentence_model[0].auto_model, sentence_model.get_embedding_dimension(), temperature=config.temperature,
        reg_lambda=options.reg_lambda, head_width=options.head_width, fixed_reads_partner=options.partner_view,
    )  # fmt: skip
    return model, exported_modules(sentence_model, pooling="cls")


def optimizer(groups: list[dict]) -> torch.optim.Optimizer:
    """The paper's AdamW, beta2 = 0.9 and no weight decay, over the parameter groups."""
    return torch.optim.AdamW(groups, betas=(0.9, 0.9), weight_decay=0.0)
