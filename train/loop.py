"""The training loop over a pairs snapshot for every objective, and export as a
sentence-transformers model."""

from __future__ import annotations

import contextlib
import math
import random
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch
from torch import nn
from viewmill.storage.files import clear_partials
from viewmill.storage.ids import fingerprint
from viewmill.train import distributed
from viewmill.train.assembly import prepare
from viewmill.train.batches import PairTexts, batches, tokenize, training_texts
from viewmill.train.checkpoints import Checkpoints, RunState
from viewmill.train.config import TrainConfig
from viewmill.train.export import ExportError, export, model_lock
from viewmill.train.objectives import OBJECTIVES
from viewmill.train.optimisation import make_optimizer, train_step
from viewmill.train.selection import DevScore, evaluates_at, patience_spent, record_dev, score_dev, select_weights

from viewmill.cpu import auto_precision
from viewmill.memory import release_freed_memory


@dataclass
class TrainReport:
    steps: int
    pairs: int
    first_loss: float
    last_loss: float
    seconds: float
    model_dir: str
    dev_evals: list[tuple[int, float]] = field(default_factory=list)  # (step, selection score)
    dev_task_evals: dict[str, list[tuple[int, float]]] = field(default_factory=dict)  # each dev task's (step, score)
    best_step: int | None = None
    selected_step: int | None = None  # the step whose weights were exported; 0: the starting model
    first_step_s: float | None = None  # the train stage's start (its snapshot read) to its first step's end
    median_step_s: float | None = None  # a step after the first (dev scoring and checkpoints included)


# "loading model X" -> a block the caller's progress reports as that, outside its rate of steps.
Phase = Callable[[str], AbstractContextManager[None]]


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def train_model(
    pairs: Sequence[tuple[str, str]] | pa.Table,
    base_model: str,
    config: TrainConfig,
    out_dir: Path,
    *,
    card: dict,
    keys: Sequence[str] | pa.Array | pa.ChunkedArray | None = None,
    on_step: Callable[[int, float], None] | None = None,
    dev: DevScore | None = None,
    phase: Phase | None = None,
    on_trained: Callable[[int], None] | None = None,
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
    model truncates at `config.max_length`, as training did. `phase(what)` wraps the work
    that is not a step (loading the model), so progress can say it and leave it out of its rate.
    `on_trained(step)` is called as soon as a step's batch is trained, before its dev scoring
    (progress counts the step there); `on_step(step, loss)` once all its work, checkpoint
    included, is done.
    """
    if config.eval_every and dev is None:
        raise ValueError("eval_every needs dev data: set train.dev in the recipe (an STS-B dev file)")
    checkpoint_dir = out_dir.with_name(out_dir.name + ".checkpoint")
    # Rank 0 alone writes checkpoints and the export; under torchrun the other ranks take no lock.
    lock = model_lock(checkpoint_dir, "checkpoints of") if distributed.is_main() else contextlib.nullcontext()
    with lock:
        if distributed.is_main():  # what an export killed part way left is no model: it goes
            clear_partials(out_dir)
        return _fit(pairs, base_model, config, out_dir, checkpoint_dir, card=card, keys=keys, dev=dev,
                    phase=phase or (lambda _: contextlib.nullcontext()), on_step=on_step,
                    on_trained=on_trained)  # fmt: skip


@dataclass
class _Run:
    """What one training run holds while it steps."""

    config: TrainConfig
    objective: nn.Module
    model: nn.Module  # the objective, or its DistributedDataParallel wrapper
    exported: nn.Module  # the SentenceTransformer sharing the objective's weights
    tokenizer: object
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler | None
    checkpoints: Checkpoints
    state: RunState
    device: str
    main: bool
    after_step: Callable[[], None] | None = None


def _fit(
    pairs, base_model, config, out_dir, checkpoint_dir, *, card, keys, dev, phase, on_step, on_trained
) -> TrainReport:
    device = distributed.init_from_environment(config.device)
    if config.precision == "auto":  # resolved where the device is known; the manifest keeps what ran
        config = config.model_copy(update={"precision": auto_precision(device)})
    if config.batch_size % distributed.world_size():
        raise ValueError(f"batch_size {config.batch_size} must divide evenly over {distributed.world_size()} ranks")
    seed_everything(config.seed)
    start = time.perf_counter()
    source = training_texts(pairs, config.objective)  # refused before the model loads
    with phase(f"loading model {base_model}"):
        run = _start(config, base_model, device, checkpoint_dir, card)
    if run.main and config.eval_every and not run.state.evals:  # the start's dev scores
        record_dev(config, run.state, 0, score_dev(dev, run.exported, run.objective), run.exported, run.checkpoints)
    plan = batches(source.lengths(), config.batch_size, config.steps, config.seed, keys=keys)
    release_freed_memory()  # planning's key table and the model load's buffers, before the steps
    _steps(run, source, plan, dev, on_step, on_trained)
    state = run.state
    if not run.main:  # rank 0 exports
        distributed.barrier()
        return TrainReport(state.step, len(source), state.losses[0], state.losses[-1], 0.0, str(out_dir))
    return _export(run, len(source), out_dir, card, time.perf_counter() - start)


def _start(config: TrainConfig, base_model: str, device: str, checkpoint_dir: Path, card: dict) -> _Run:
    """The objective, optimiser and loss scaler, restored from the checkpoint when there is one."""
    objective, exported, tokenizer = prepare(config, base_model, device)
    optimizer = make_optimizer(config, objective)
    scaler = torch.amp.GradScaler(torch.device(device).type) if config.precision == "fp16" else None
    checkpoints = Checkpoints(checkpoint_dir, fingerprint(config.model_dump(), card))
    state = checkpoints.restore(objective, optimizer, scaler) or RunState()
    distributed.barrier()  # every rank has read the checkpoint before rank 0 may write the next
    main = distributed.is_main()
    model = objective
    if distributed.world_size() > 1:
        # Unused parameters: the encoder while the head warms up.
        model = torch.nn.parallel.DistributedDataParallel(objective, find_unused_parameters=True)
    run = _Run(config, objective, model, exported, tokenizer, optimizer, scaler, checkpoints, state, device, main)
    hook = OBJECTIVES.get(config.objective).after_step
    if hook is not None:  # e.g. BSL's EMA of the step just taken (state.step is set before it runs)
        run.after_step = lambda: hook(objective, config, state.step)
    return run


def _steps(run: _Run, source: PairTexts, plan: list[list[int]], dev: DevScore | None, on_step, on_trained) -> None:
    """The planned steps not done before a restart; stops early when dev patience is spent."""
    config, state = run.config, run.state
    run.objective.train()
    for step, index in enumerate(plan, start=1):
        if step <= state.step:
            continue  # done before the restart
        index = distributed.shard(index)
        batch = tokenize(run.tokenizer, source.texts(index), config, run.device)
        state.step = step
        state.losses.append(
            train_step(run.model, run.optimizer, batch, len(index), train_encoder=step > config.head_warmup_steps,
                       precision=config.precision, scaler=run.scaler, after_step=run.after_step,
                       accumulation=config.grad_accumulation, layout=source.layout(index),
                       cached_gradients=OBJECTIVES.get(config.objective).cached_gradients)
        )  # fmt: skip
        if not math.isfinite(state.losses[-1]):
            raise _diverged(run, f"loss became {state.losses[-1]} at step {step}")
        if on_trained is not None:
            on_trained(step)
        if run.main and evaluates_at(config, step):
            result = score_dev(dev, run.exported, run.objective)
            record_dev(config, state, step, result, run.exported, run.checkpoints)
        if run.main and config.checkpoint_every and step % config.checkpoint_every == 0 and step < config.steps:
            run.checkpoints.save(state, run.objective, run.optimizer, run.scaler)
        if on_step is not None:
            on_step(step, state.losses[-1])
        if evaluates_at(config, step) and distributed.broadcast_flag(run.main and patience_spent(config, state)):
            break
    run.objective.eval()


class TrainingDiverged(RuntimeError):
    """Training met a loss or weights that are not finite numbers: nothing is exported."""


def _diverged(run: _Run, what: str) -> TrainingDiverged:
    """The error that stops a run whose numbers overflowed; its checkpoints (the same
    configuration diverges again from them) are removed."""
    config = run.config
    if run.main:
        run.checkpoints.clear()
    return TrainingDiverged(
        f"{what} (encoder_lr={config.encoder_lr:g}, head_lr={config.head_lr:g}, precision {config.precision}): "
        f"lower the learning rate (train.encoder_lr, train.head_lr; the safe defaults are 1e-05 and 0.001) and "
        f"run again; no model was exported"
    )


def _export(run: _Run, n_pairs: int, out_dir: Path, card: dict, seconds: float) -> TrainReport:
    """Export the selected weights with their manifest; the checkpoints are then done with.
    Weights that are not finite (an update overflowed after the last loss) are refused."""
    config, state = run.config, run.state
    selected = select_weights(config, state, run.exported, run.checkpoints)
    if not all(torch.isfinite(parameter).all() for parameter in run.exported.parameters()):
        raise _diverged(run, f"the weights are not finite numbers after step {state.step}")
    report = TrainReport(
        steps=state.step,
        pairs=n_pairs,
        first_loss=state.losses[0] if state.losses else float("nan"),
        last_loss=state.losses[-1] if state.losses else float("nan"),
        seconds=seconds,
        model_dir=str(card.get("path", out_dir)),
        dev_evals=state.evals,
        dev_task_evals=state.task_evals,
        best_step=state.best_step if config.eval_every else None,
        selected_step=selected,
    )
    manifest = {**card, "train_config": config.model_dump(), "report": asdict(report), "selected_step": selected,
                "improved_over_start": None if not config.eval_every else selected != 0,
                "max_seq_length": config.max_length}  # fmt: skip
    try:
        export(run.exported, out_dir, manifest)
    except ExportError as exc:  # the checkpoints stay: say what running again costs
        raise ExportError(f"{exc}: {_resume_note(run.checkpoints)}") from exc.__cause__
    run.checkpoints.clear()
    distributed.barrier()
    return report


def _resume_note(checkpoints: Checkpoints) -> str:
    if (checkpoints.folder / "state.pt").is_file():
        return f"training resumes from its last checkpoint, kept in {checkpoints.folder}"
    return "no checkpoint was kept (train.checkpoint_every), so training starts over"


def training_code_fingerprint(package: Path = Path(__file__).parent) -> str:
    """Hash of the training code itself (every module of the train package, by name and
    text), so a changed trainer never reuses an old model."""
    modules = sorted(package.rglob("*.py"))  # sub-packages too: dev scoring selects the exported state
    return fingerprint(*((path.relative_to(package).as_posix(), path.read_text(encoding="utf-8")) for path in modules))
