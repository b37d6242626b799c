"""A few real training steps, timed: what `viewmill plan` measures of the train stage on each
device it has, and what a GPU benchmark measures where the rest of the stack cannot travel."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from viewmill.train.config import TrainConfig
from viewmill.train.loop import train_model

from viewmill.memory import Watch

TIMED_STEPS = 3  # training steps timed after one warm-up step


@dataclass
class TrainMeasure:
    """A few real training steps on sample pairs with a recipe's settings."""

    device: str
    load_s: float  # from the call to the first step's start: the base model, optimiser, data
    step_s: float  # one step, after a warm-up step
    export_s: float
    peak_rss: int
    peak_gpu: int | None = None  # bytes, on a GPU


def time_training(
    config: TrainConfig, encoder: str, pairs: pa.Table, device: str, out: Path, card: dict[str, Any],
    timed_steps: int = TIMED_STEPS,
) -> TrainMeasure:  # fmt: skip
    """1 + `timed_steps` steps of `config`'s objective, batch size and max length on `pairs`
    (no checkpoints, no dev scoring), the model exported to `out` as a run would."""
    steps = 1 + timed_steps
    config = config.model_copy(update={"steps": steps, "checkpoint_every": 0, "eval_every": 0, "device": device,
                                       "head_warmup_steps": min(config.head_warmup_steps or 0, steps)})  # fmt: skip
    stamps: list[float] = []
    on_gpu = device.startswith("cuda")
    if on_gpu:
        import torch

        torch.cuda.reset_peak_memory_stats()
    with Watch() as watch:
        t0 = time.perf_counter()
        stamp = lambda step, loss: stamps.append(time.perf_counter())  # noqa: E731
        train_model(pairs, encoder, config, out, card=card, keys=pairs["sentence_id"].to_pylist(), on_step=stamp)
    step_s = (stamps[-1] - stamps[0]) / max(len(stamps) - 1, 1)
    peak_gpu = None
    if on_gpu:
        import torch

        peak_gpu = int(torch.cuda.max_memory_allocated())
    return TrainMeasure(device, stamps[0] - t0 - step_s, step_s, t0 + watch.seconds - stamps[-1], watch.peak, peak_gpu)
