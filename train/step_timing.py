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
    (no checkpoints, no dev scoring), the model exported to `out` as a run would. The peak
    memory also covers one untimed step on a batch of `max_length` tokens (`longest_batch`):
    RSS rises with the longest batch a run has met and stays there (1M pairs: 1.36 GiB after
    a 13-token first step, 2.63 after a 62-token one; BENCHMARKS.md)."""
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
        done = time.perf_counter()
        # Untimed: the peak of a long run is the step of its longest batch, which a sample's few steps miss.
        longest = longest_batch(pairs, config.batch_size, config.max_length)
        once = config.model_copy(update={"steps": 1, "head_warmup_steps": 0})
        train_model(longest, encoder, once, out.with_name(out.name + "-longest"), card=card)
    step_s = (stamps[-1] - stamps[0]) / max(len(stamps) - 1, 1)
    peak_gpu = None
    if on_gpu:
        import torch

        peak_gpu = int(torch.cuda.max_memory_allocated())
    return TrainMeasure(device, stamps[0] - t0 - step_s, step_s, done - stamps[-1], watch.peak, peak_gpu)


def longest_batch(pairs: pa.Table, batch_size: int, max_length: int) -> pa.Table:
    """`batch_size` of the pairs with every view text replaced by the pairs' longest text, its
    words repeated to `max_length` words (at least `max_length` tokens, cut to that): the
    batch a long run meets sooner or later. Its step is trained without sentence keys: the
    first rows may share a sentence, and this batch only measures memory."""
    rows = pairs.slice(0, batch_size)
    views = [name for name in ("text_a", "text_b") if name in rows.column_names]
    longest = max((text for name in views for text in pairs[name].to_pylist()), key=len, default="")
    words = longest.split() or ["word"]
    text = " ".join((words * (max_length // len(words) + 1))[:max_length])
    for name in views:
        rows = rows.set_column(rows.schema.get_field_index(name), name, pa.array([text] * rows.num_rows, pa.string()))
    return rows
