"""The BSL training loop over a pairs snapshot, and export as a sentence-transformers model."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from storage.files import build_dir_atomically
from storage.ids import fingerprint
from train.bsl import BSL
from train.encoder import load_sentence_model

MANIFEST = "viewmill.json"


class BSLConfig(BaseModel):
    """BSL hyperparameters. The defaults are the safe post-training setting for strong
    encoders: the predictor warms up first with the encoder frozen, then both train, the
    encoder at a small learning rate."""

    model_config = ConfigDict(extra="forbid")

    objective: str = Field("bsl", pattern="^bsl$")
    steps: int = Field(120, ge=1)
    batch_size: int = Field(64, ge=2)
    max_length: int = Field(64, ge=8)
    encoder_lr: float = Field(1e-5, gt=0)
    predictor_lr: float = Field(1e-3, gt=0)
    predictor_warmup_steps: int = Field(40, ge=0)
    momentum: float = Field(0.999, ge=0, le=1)
    predictor_k: int = Field(8, ge=1)
    seed: int = 13
    device: str = "cpu"
    precision: str = Field("fp32", pattern="^(fp32|bf16|fp16)$", description="autocast dtype; fp16 adds loss scaling")

    @model_validator(mode="after")
    def _warmup_fits(self) -> BSLConfig:
        if self.predictor_warmup_steps >= self.steps:
            raise ValueError(
                f"predictor_warmup_steps ({self.predictor_warmup_steps}) must be below steps ({self.steps}), "
                "or the encoder never trains"
            )
        return self


@dataclass
class TrainReport:
    steps: int
    pairs: int
    first_loss: float
    last_loss: float
    seconds: float
    model_dir: str


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def batches(
    lengths: Sequence[int], batch_size: int, steps: int, seed: int, group: int = 32, keys: Sequence[str] | None = None
) -> list[list[int]]:
    """`steps` length-grouped batches of pair indices.

    Each epoch is a fresh permutation cut into windows of `group` batches; a window is
    sorted by length before it is cut into batches (little padding), and the batches of
    the epoch are shuffled. With `keys` (the pairs' sentence ids), no batch holds two pairs
    of one sentence: it would be its own negative. Pairs that do not fit wait for the next
    batch of the window; what is left at the end of an epoch is dropped.
    """
    n_pairs = len(lengths)
    if n_pairs < batch_size:
        raise ValueError(
            f"the snapshot has {n_pairs} pairs, fewer than one batch of {batch_size}: lower train.batch_size"
        )
    rng = np.random.default_rng(seed)
    out: list[list[int]] = []
    while len(out) < steps:
        order = rng.permutation(n_pairs).tolist()
        epoch: list[list[int]] = []
        for start in range(0, n_pairs, batch_size * group):
            window = sorted(order[start : start + batch_size * group], key=lambda i: lengths[i])
            epoch.extend(_cut(window, batch_size, keys))
        if not epoch:
            raise ValueError(f"no batch of {batch_size} pairs with distinct sentences: lower train.batch_size")
        out.extend(epoch[i] for i in rng.permutation(len(epoch)))
    return out[:steps]


def _cut(window: list[int], batch_size: int, keys: Sequence[str] | None) -> list[list[int]]:
    cut: list[list[int]] = []
    pending = window
    while len(pending) >= batch_size:
        batch: list[int] = []
        seen: set = set()
        rest: list[int] = []
        for index in pending:
            key = keys[index] if keys is not None else index
            if len(batch) < batch_size and key not in seen:
                batch.append(index)
                seen.add(key)
            else:
                rest.append(index)
        if len(batch) < batch_size:
            break
        cut.append(batch)
        pending = rest
    return cut


def train_bsl(
    pairs: Sequence[tuple[str, str]],
    base_model: str,
    config: BSLConfig,
    out_dir: Path,
    *,
    card: dict,
    keys: Sequence[str] | None = None,
    on_step: Callable[[int, float], None] | None = None,
) -> TrainReport:
    """Fit BSL on (view a, view b) pairs starting from `base_model`; export to `out_dir`.

    `keys` (sentence ids, one per pair) keep two pairs of one sentence out of a batch.

    The export is written to a temporary sibling and renamed into place, so `out_dir`
    either holds a complete model with its manifest or does not exist.
    """
    seed_everything(config.seed)
    start = time.perf_counter()
    sentence_model = load_sentence_model(base_model, device=config.device)
    transformer = sentence_model[0]
    encoder = transformer.auto_model
    tokenizer = sentence_model.tokenizer
    dim = sentence_model.get_embedding_dimension()
    model = BSL(encoder, dim, config.predictor_k).to(config.device)
    optimizer = torch.optim.Adam(
        [
            {"params": list(model.online.parameters()), "lr": config.encoder_lr},
            {"params": list(model.predictor.parameters()), "lr": config.predictor_lr},
        ]
    )
    scaler = torch.amp.GradScaler(torch.device(config.device).type) if config.precision == "fp16" else None
    model.train()
    losses: list[float] = []
    lengths = [len(a) + len(b) for a, b in pairs]
    plan = batches(lengths, config.batch_size, config.steps, config.seed, keys=keys)
    for step, index in enumerate(plan, start=1):
        texts = [pairs[i][0] for i in index] + [pairs[i][1] for i in index]
        batch = tokenizer(texts, padding=True, truncation=True, max_length=config.max_length, return_tensors="pt")
        batch = {k: v.to(config.device) for k, v in batch.items()}
        warming_up = step <= config.predictor_warmup_steps
        losses.append(
            bsl_step(model, optimizer, batch, len(index), train_encoder=not warming_up, momentum=config.momentum,
                     precision=config.precision, scaler=scaler)
        )  # fmt: skip
        if on_step is not None:
            on_step(step, losses[-1])
    model.eval()
    report = TrainReport(
        steps=config.steps,
        pairs=len(pairs),
        first_loss=losses[0],
        last_loss=losses[-1],
        seconds=time.perf_counter() - start,
        model_dir=str(out_dir),
    )
    export(sentence_model, out_dir, {**card, "train_config": config.model_dump(), "report": asdict(report)})
    return report


AUTOCAST_DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def bsl_step(
    model: BSL,
    optimizer: torch.optim.Optimizer,
    batch: dict[str, torch.Tensor],
    n: int,
    *,
    train_encoder: bool,
    momentum: float,
    precision: str = "fp32",
    scaler: torch.amp.GradScaler | None = None,
) -> float:
    """One optimiser step and, when the encoder trained and the step was taken, one EMA update.

    With fp16 loss scaling an overflowing step is skipped by the scaler; the target must
    then stay where it is, or it would drift towards weights that did not change.
    """
    dtype = AUTOCAST_DTYPES[precision]
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(batch["input_ids"].device.type, dtype=dtype, enabled=dtype is not None):
        loss = model.loss(batch, n, train_encoder=train_encoder)
    if scaler is None:
        loss.backward()
        optimizer.step()
        stepped = True
    else:
        scaler.scale(loss).backward()
        scale = scaler.get_scale()
        scaler.step(optimizer)
        scaler.update()
        stepped = scaler.get_scale() >= scale  # the scaler lowers its scale exactly when it skips
    if train_encoder and stepped:
        model.update_target(momentum)
    return float(loss.detach())


def export(sentence_model, out_dir: Path, manifest: dict) -> None:
    """Save the online encoder as a sentence-transformers directory with a model card."""
    lines = [
        f"# {out_dir.name}",
        "",
        f"Trained by viewmill with {manifest['train_config']['objective'].upper()} "
        f"from `{manifest.get('base_model')}`.",
        "",
        f"- recipe: `{manifest.get('recipe')}`",
        f"- pairs snapshot: `{manifest.get('snapshot')}`",
        f"- steps: {manifest['train_config']['steps']}, batch size {manifest['train_config']['batch_size']}",
        "",
        "Load with `SentenceTransformer(path)`. Metrics are in the lake's `evals` table.",
    ]

    def write(staging: Path) -> None:
        sentence_model.save(str(staging))
        (staging / "README.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2, default=str), encoding="utf-8")

    build_dir_atomically(out_dir, write, replace=True)


def is_complete_model(path: Path) -> bool:
    return (path / MANIFEST).is_file()


def training_code_fingerprint() -> str:
    """Hash of the training code itself, so a changed trainer never reuses an old model."""
    here = Path(__file__).parent
    return fingerprint(*((here / name).read_text(encoding="utf-8") for name in ("bsl.py", "loop.py")))
