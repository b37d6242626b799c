"""The training loop over a pairs snapshot for every objective, and export as a
sentence-transformers model."""

from __future__ import annotations

import contextlib
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch
from torch import nn
from viewmill.storage.ids import fingerprint
from viewmill.train import distributed
from viewmill.train.bsl import BSL
from viewmill.train.checkpoints import Checkpoints, RunState
from viewmill.train.config import TrainConfig
from viewmill.train.encoder import load_sentence_model
from viewmill.train.export import MANIFEST, export, is_complete_model, model_lock
from viewmill.train.objectives import ISBERT, OBJECTIVES, SGOPT, Contrastive

__all__ = ["MANIFEST", "TrainReport", "is_complete_model", "train_model", "training_code_fingerprint"]


@dataclass
class TrainReport:
    steps: int
    pairs: int
    first_loss: float
    last_loss: float
    seconds: float
    model_dir: str
    dev_evals: list[tuple[int, float]] = field(default_factory=list)
    best_step: int | None = None
    selected_step: int | None = None  # the step whose weights were exported; 0: the starting model


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


def build_objective(config: TrainConfig, sentence_model) -> tuple[nn.Module, list[nn.Module]]:
    """The objective's training module and the sentence-transformers modules to export.

    The exported modules share their weights with the training module, so what is saved
    at the end is what was trained; the pooling is the one the loss trains (a base
    model's own pooling and Dense layers are dropped; Normalize does not change cosines).
    """
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling

    plugin = OBJECTIVES.get(config.objective).build
    if plugin is not None:  # a registered plugin builds its own
        return plugin(config, sentence_model)
    transformer = sentence_model[0]
    encoder = transformer.auto_model
    dim = sentence_model.get_embedding_dimension()
    tail = [m for m in list(sentence_model)[1:] if isinstance(m, Normalize)]
    mean = [transformer, Pooling(dim, pooling_mode="mean"), *tail]  # the pooling the loss trains, whatever the base had
    if config.objective == "bsl":
        return BSL(encoder, dim, config.predictor_k), mean
    if config.objective in ("ntxent", "infonce"):
        return Contrastive(encoder, config.objective, config.temperature), mean
    if config.objective == "sgopt":
        model = SGOPT(
            encoder, dim, temperature=config.temperature, reg_lambda=config.sgopt_lambda,
            head_width=config.sgopt_head_width, fixed_reads_partner=config.sgopt_partner_view,
        )  # fmt: skip
        return model, [transformer, Pooling(dim, pooling_mode="cls"), *tail]  # c_i is BERT_T's [CLS]
    model = ISBERT(encoder, dim, config.isbert_filters, config.isbert_windows)
    return model, [transformer, model.cnn, Pooling(model.cnn.get_sentence_embedding_dimension(), "mean")]


def make_optimizer(config: TrainConfig, objective: nn.Module) -> torch.optim.Optimizer:
    head = objective.head_parameters()
    head_ids = {id(p) for p in head}
    encoder = [p for p in objective.parameters() if p.requires_grad and id(p) not in head_ids]
    groups = [{"params": encoder, "lr": config.encoder_lr, "name": "encoder"}]
    if head:
        groups.append({"params": head, "lr": config.head_lr, "name": "head"})
    if config.objective == "sgopt":  # the paper's AdamW with beta2 = 0.9
        return torch.optim.AdamW(groups, betas=(0.9, 0.9), weight_decay=0.0)
    return torch.optim.Adam(groups)


DevScore = Callable[[object], float]  # a SentenceTransformer in, STS-B dev Spearman x100 out


def train_model(
    pairs: Sequence[tuple[str, str]] | pa.Table,
    base_model: str,
    config: TrainConfig,
    out_dir: Path,
    *,
    card: dict,
    keys: Sequence[str] | None = None,
    on_step: Callable[[int, float], None] | None = None,
    dev: DevScore | None = None,
) -> TrainReport:
    """Fit `config.objective` on (view a, view b) pairs starting from `base_model`; export to `out_dir`.

    `pairs` is a list of (view a, view b) or an Arrow table with text_a and text_b (a
    snapshot as the lake returns it: its texts stay in Arrow buffers and each batch takes
    its rows). `keys` (sentence ids, one per pair) keep two pairs of one sentence out of a
    batch. Every `checkpoint_every` steps the full training state (weights, optimiser, loss
    scaler, random generators) goes to `<out_dir>.checkpoint/`; a run started again with
    the same configuration resumes from it and ends with the same weights as one that
    never stopped. A second run training the same `out_dir` meanwhile is refused
    (ModelBusyError): it would share those checkpoints. With `dev` and `eval_every`, the
    exported model is scored before training and every `eval_every` steps; the best state
    (the start included) is kept and exported, and training stops early after
    `early_stopping_patience` evaluations without improvement.

    The export is written to a temporary sibling and renamed into place, so `out_dir`
    either holds a complete model with its manifest or does not exist. The exported
    model truncates at `config.max_length`, as training did.
    """
    if config.eval_every and dev is None:
        raise ValueError("eval_every needs dev data: set train.dev in the recipe (an STS-B dev file)")
    checkpoint_dir = out_dir.with_name(out_dir.name + ".checkpoint")
    # Rank 0 alone writes checkpoints and the export; under torchrun the other ranks take no lock.
    lock = model_lock(checkpoint_dir, "checkpoints of") if distributed.is_main() else contextlib.nullcontext()
    with lock:
        return _fit(pairs, base_model, config, out_dir, checkpoint_dir, card=card, keys=keys, on_step=on_step, dev=dev)


def prepare(config: TrainConfig, base_model: str, device: str = "cpu"):
    """The objective, the sentence-transformers model to export (sharing its weights, truncating
    at `config.max_length` as training does) and the tokenizer."""
    from sentence_transformers import SentenceTransformer

    sentence_model = load_sentence_model(base_model, device=device)
    sentence_model[0].max_seq_length = config.max_length
    objective, export_modules = build_objective(config, sentence_model)
    objective.to(device)
    return objective, SentenceTransformer(modules=export_modules, device=device), sentence_model.tokenizer


def tokenize(tokenizer, texts: list[str], config: TrainConfig, device: str = "cpu") -> dict[str, torch.Tensor]:
    batch = tokenizer(texts, padding=True, truncation=True, max_length=config.max_length, return_tensors="pt")
    return {k: v.to(device) for k, v in batch.items()}


def _fit(pairs, base_model, config, out_dir, checkpoint_dir, *, card, keys, on_step, dev) -> TrainReport:
    device = distributed.init_from_environment(config.device)
    if config.batch_size % distributed.world_size():
        raise ValueError(f"batch_size {config.batch_size} must divide evenly over {distributed.world_size()} ranks")
    seed_everything(config.seed)
    start = time.perf_counter()
    objective, exported, tokenizer = prepare(config, base_model, device)
    optimizer = make_optimizer(config, objective)
    scaler = torch.amp.GradScaler(torch.device(device).type) if config.precision == "fp16" else None
    checkpoints = Checkpoints(checkpoint_dir, fingerprint(config.model_dump(), card))
    state = checkpoints.restore(objective, optimizer, scaler) or RunState()
    after_step = None
    if isinstance(objective, BSL):  # the EMA of the step just taken (state.step is set before it runs)
        after_step = lambda: objective.update_target(target_momentum(config, state.step))  # noqa: E731
    distributed.barrier()  # every rank has read the checkpoint before rank 0 may write the next
    main = distributed.is_main()
    if main and config.eval_every and not state.evals:
        state.record(0, _score(dev, exported, objective), exported, checkpoints)
    model = objective
    if distributed.world_size() > 1:
        # Unused parameters: the encoder while the head warms up.
        model = torch.nn.parallel.DistributedDataParallel(objective, find_unused_parameters=True)
    source = PairTexts(pairs)
    plan = batches(source.lengths(), config.batch_size, config.steps, config.seed, keys=keys)
    objective.train()
    for step, index in enumerate(plan, start=1):
        if step <= state.step:
            continue  # done before the restart
        index = distributed.shard(index)
        batch = tokenize(tokenizer, source.texts(index), config, device)
        warming_up = step <= config.head_warmup_steps
        state.step = step
        state.losses.append(
            train_step(model, optimizer, batch, len(index), train_encoder=not warming_up,
                       precision=config.precision, scaler=scaler, after_step=after_step,
                       accumulation=config.grad_accumulation)
        )  # fmt: skip
        if main and config.eval_every and step % config.eval_every == 0:
            state.record(step, _score(dev, exported, objective), exported, checkpoints)
        if main and config.checkpoint_every and step % config.checkpoint_every == 0 and step < config.steps:
            checkpoints.save(state, objective, optimizer, scaler)
        if on_step is not None:
            on_step(step, state.losses[-1])
        patience = config.early_stopping_patience
        if (
            config.eval_every
            and step % config.eval_every == 0
            and distributed.broadcast_flag(main and patience is not None and state.evals_since_best() >= patience)
        ):
            break
    objective.eval()
    if not main:  # rank 0 exports
        distributed.barrier()
        return TrainReport(state.step, len(source), state.losses[0], state.losses[-1], 0.0, str(out_dir))
    selected = state.step
    if config.eval_every and config.keep_best:
        selected = state.best_step
        if selected != state.step:
            exported.load_state_dict(checkpoints.best_weights())
    report = TrainReport(
        steps=state.step,
        pairs=len(source),
        first_loss=state.losses[0] if state.losses else float("nan"),
        last_loss=state.losses[-1] if state.losses else float("nan"),
        seconds=time.perf_counter() - start,
        model_dir=str(card.get("path", out_dir)),
        dev_evals=state.evals,
        best_step=state.best_step if config.eval_every else None,
        selected_step=selected,
    )
    manifest = {**card, "train_config": config.model_dump(), "report": asdict(report), "selected_step": selected,
                "improved_over_start": None if not config.eval_every else selected != 0,
                "max_seq_length": config.max_length}  # fmt: skip
    export(exported, out_dir, manifest)
    checkpoints.clear()
    distributed.barrier()
    return report


class PairTexts:
    """Pairs as Arrow columns (compact, no Python string per text until a batch needs it)."""

    def __init__(self, pairs: Sequence[tuple[str, str]] | pa.Table) -> None:
        if isinstance(pairs, pa.Table):
            self.a, self.b = pairs["text_a"].combine_chunks(), pairs["text_b"].combine_chunks()
        else:
            self.a = pa.array([a for a, _ in pairs], pa.string())
            self.b = pa.array([b for _, b in pairs], pa.string())

    def __len__(self) -> int:
        return len(self.a)

    def lengths(self) -> list[int]:
        return pc.add(pc.utf8_length(self.a), pc.utf8_length(self.b)).to_pylist()

    def texts(self, index: list[int]) -> list[str]:
        """View a of each pair, then view b of each, in `index` order."""
        rows = pa.array(index, pa.int64())
        return self.a.take(rows).to_pylist() + self.b.take(rows).to_pylist()


def target_momentum(config: TrainConfig, step: int) -> float:
    """BSL's EMA momentum at `step` (1-based): constant, or BYOL's cosine increase from
    `momentum` at the first step to 1 at the last."""
    if config.momentum_schedule == "constant" or config.steps <= 1:
        return config.momentum
    progress = (step - 1) / (config.steps - 1)
    return 1 - (1 - config.momentum) * (math.cos(math.pi * progress) + 1) / 2


def _score(dev: DevScore, exported, objective: nn.Module) -> float:
    objective.eval()
    try:
        with torch.no_grad():
            return float(dev(exported))
    finally:
        objective.train()


AUTOCAST_DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


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
) -> float:
    """One optimiser step and, when the encoder trained and the step was taken, `after_step`
    (BSL's EMA update).

    With fp16 loss scaling an overflowing step is skipped by the scaler; BSL's target must
    then stay where it is, or it would drift towards weights that did not change.
    """
    dtype = AUTOCAST_DTYPES[precision]
    optimizer.zero_grad(set_to_none=True)
    inner = getattr(objective, "module", objective)  # under DistributedDataParallel
    gathers = getattr(inner, "gathers_negatives", False)
    world = distributed.world_size()
    # A loss over the global batch whose gradient flows only through this rank's rows is
    # scaled by the world size, so that DDP's average is the single-process gradient.
    scale = world if gathers and world > 1 else 1
    with torch.autocast(batch["input_ids"].device.type, dtype=dtype, enabled=dtype is not None):
        if accumulation > 1 and gathers:
            with _no_sync(objective):
                loss = inner.cached_backward(batch, n, accumulation, scale)
            distributed.average_gradients(inner)
        elif accumulation > 1:
            loss = _accumulated_backward(objective, batch, n, accumulation, train_encoder, scaler)
        else:
            loss = objective(batch, n, train_encoder=train_encoder)
            (scaler.scale(loss * scale) if scaler is not None else loss * scale).backward()
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


def _no_sync(model: nn.Module):
    """DDP's no_sync for backward passes that do not go through its forward (synced by hand)."""
    return model.no_sync() if hasattr(model, "no_sync") else contextlib.nullcontext()


def _accumulated_backward(
    model: nn.Module, batch: dict[str, torch.Tensor], n: int, pieces: int, train_encoder: bool, scaler
) -> torch.Tensor:
    """Plain accumulation (BSL: no in-batch negatives): each piece's loss weighted by its
    share of the pairs; DDP syncs gradients on the last piece only."""
    size = math.ceil(n / pieces)
    total = torch.zeros(())
    starts = list(range(0, n, size))
    for i, start in enumerate(starts):
        pairs = list(range(start, min(start + size, n)))
        rows = pairs + [n + p for p in pairs]
        piece = {k: v[rows] for k, v in batch.items()}
        sync = contextlib.nullcontext() if i == len(starts) - 1 else _no_sync(model)
        with sync:
            loss = model(piece, len(pairs), train_encoder=train_encoder) * (len(pairs) / n)
            (scaler.scale(loss) if scaler is not None else loss).backward()
        total = total + loss.detach().float().cpu()
    return total


def training_code_fingerprint() -> str:
    """Hash of the training code itself, so a changed trainer never reuses an old model."""
    here = Path(__file__).parent
    names = ("bsl.py", "config.py", "distributed.py", "loop.py", "objectives.py")
    return fingerprint(*((here / name).read_text(encoding="utf-8") for name in names))
