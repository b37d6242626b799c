"""Pairs as Arrow text columns, length-grouped batches of them, and their tokenisation."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch
from viewmill.train.config import TrainConfig


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
    """Full batches of distinct keys from a length-sorted window; the rest is dropped."""
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


def tokenize(tokenizer, texts: list[str], config: TrainConfig, device: str = "cpu") -> dict[str, torch.Tensor]:
    batch = tokenizer(texts, padding=True, truncation=True, max_length=config.max_length, return_tensors="pt")
    return {k: v.to(device) for k, v in batch.items()}
