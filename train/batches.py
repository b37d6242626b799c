"""Pairs as Arrow text columns (with their hard negatives and source sentences where the
objective reads them), length-grouped batches of them, and their tokenisation."""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch
from viewmill.train.config import TrainConfig
from viewmill.train.layout import BatchLayout
from viewmill.train.objectives import OBJECTIVES


class PairTexts:
    """Pairs as Arrow columns (compact, no Python string per text until a batch needs it).

    A table may carry `negatives` (list<string>: k >= 1 for every pair, or for some pairs k
    and for the others an empty list, their snapshot giving negatives to only some) and
    `text_source` (the sentence the views were made from); sources are read only when
    `sources` is set (an objective that needs them), and only when some differ from view a.
    """

    def __init__(self, pairs: Sequence[tuple[str, str]] | pa.Table, *, sources: bool = False) -> None:
        self.negatives: pa.Array | None = None
        self.source: pa.Array | None = None
        self.k = 0
        self.holders: np.ndarray | None = None  # which pairs carry negatives, when only some do
        if not isinstance(pairs, pa.Table):
            self.a = pa.array([a for a, _ in pairs], pa.string())
            self.b = pa.array([b for _, b in pairs], pa.string())
            return
        # The table's own chunks: combining them would copy every text once more.
        self.a: pa.Array | pa.ChunkedArray = pairs["text_a"]
        self.b: pa.Array | pa.ChunkedArray = pairs["text_b"]
        if "negatives" in pairs.column_names and len(pairs):
            self.negatives, self.k = _negatives(pairs["negatives"])
            counts = pc.list_value_length(self.negatives).to_numpy(zero_copy_only=False)
            if not counts.all():
                self.holders = counts > 0
        if sources and "text_source" in pairs.column_names:
            self.source = pairs["text_source"].combine_chunks()
            if self.source.null_count:
                raise ValueError(
                    f"{self.source.null_count} pairs have no text_source: give every pair its source sentence, "
                    "or leave the column out (view a is then the source)"
                )
            if pc.all(pc.equal(self.source, self.a)).as_py():
                self.source = None  # view a is the source sentence itself (identity pairings): embed it once

    def __len__(self) -> int:
        return len(self.a)

    def lengths(self) -> np.ndarray:
        """Characters per pair over every text a batch tokenises for it (views, negatives, source)."""
        total = pc.add(pc.utf8_length(self.a), pc.utf8_length(self.b))
        if self.negatives is not None:
            each = pc.utf8_length(self.negatives.flatten()).to_numpy(zero_copy_only=False)
            owner = pc.list_parent_indices(self.negatives).to_numpy(zero_copy_only=False)
            total = pc.add(total, pa.array(np.bincount(owner, weights=each, minlength=len(self)).astype(np.int64)))
        if self.source is not None:
            total = pc.add(total, pc.utf8_length(self.source))
        return total.to_numpy(zero_copy_only=False)

    def texts(self, index: list[int]) -> list[str]:
        """View a of each pair, then view b of each, then each pair's negatives (none for a
        pair without), then each source, in `index` order (the rows `layout` describes)."""
        rows = pa.array(index, pa.int64())
        out = rows_of(self.a, index) + rows_of(self.b, index)
        if self.negatives is not None:
            out += self.negatives.take(rows).flatten().to_pylist()
        if self.source is not None:
            out += self.source.take(rows).to_pylist()
        return out

    def layout(self, index: list[int]) -> BatchLayout | None:
        """The layout of a batch of these pairs; None when it is the plain [a..., b...]."""
        if self.negatives is None and self.source is None:
            return None
        holders = None if self.holders is None else tuple(np.flatnonzero(self.holders[index]).tolist())
        return BatchLayout(len(index), self.k, self.source is not None, holders)


def rows_of(column: pa.Array | pa.ChunkedArray, index: list[int]) -> list:
    """`column`'s values at `index`, in that order. A chunked column is taken a chunk at a time:
    Arrow's take on a chunked string column concatenates every chunk first, a copy of the whole
    column (a million pairs' texts) for each batch."""
    if isinstance(column, pa.Array):
        column = pa.chunked_array([column])
    starts = np.cumsum([0] + [len(chunk) for chunk in column.chunks])
    wanted = np.asarray(index, dtype=np.int64)
    chunk_of = np.searchsorted(starts, wanted, side="right") - 1
    out: list = [None] * len(wanted)
    for chunk in np.unique(chunk_of).tolist():
        at = np.flatnonzero(chunk_of == chunk)
        values = column.chunk(chunk).take(pa.array(wanted[at] - starts[chunk])).to_pylist()
        for position, value in zip(at.tolist(), values, strict=True):
            out[position] = value
    return out


def _negatives(column: pa.ChunkedArray) -> tuple[pa.Array, int]:
    """The `negatives` column checked: lists of strings, none missing, k >= 1 for every pair
    or for some (the others' lists empty)."""
    kind = column.type
    listed = pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)
    if not listed or not (pa.types.is_string(kind.value_type) or pa.types.is_large_string(kind.value_type)):
        raise ValueError(f"the pairs' negatives column is {kind}: it must be list<string>, each pair's hard negatives")
    array = column.combine_chunks()
    if array.null_count or array.flatten().null_count:
        raise ValueError("some pairs' negatives are null: every pair needs k non-null hard negatives")
    lengths = pc.list_value_length(array)
    counts = pc.min_max(pc.filter(lengths, pc.greater(lengths, 0)))
    fewest, most = counts["min"].as_py() or 0, counts["max"].as_py() or 0
    if fewest != most:
        raise ValueError(
            f"pairs carry {fewest} to {most} hard negatives: every pair needs the same number k >= 1, or none (pad "
            "or cut them when pairing)"
        )
    if most == 0:
        raise ValueError(
            "every pair's negatives list is empty: give each pair k >= 1 hard negatives, or drop the column"
        )
    return array, most


def training_texts(pairs: Sequence[tuple[str, str]] | pa.Table, objective: str) -> PairTexts:
    """The pairs as `objective` reads them; hard negatives are refused where it trains on none."""
    entry = OBJECTIVES.get(objective)
    texts = PairTexts(pairs, sources=entry.needs_source)
    if texts.k and not entry.negatives:
        users = ", ".join(name for name in OBJECTIVES.names() if OBJECTIVES.get(name).negatives)
        raise ValueError(
            f"objective '{objective}' does not train on hard negatives, but the pairs carry {texts.k} per pair (a "
            f"negatives column): use an objective that does ({users}), or a pairs snapshot without negatives"
        )
    return texts


def batches(
    lengths: Sequence[int] | np.ndarray,
    batch_size: int,
    steps: int,
    seed: int,
    group: int = 32,
    keys: Sequence[Hashable] | pa.Array | pa.ChunkedArray | None = None,
) -> list[list[int]]:
    """`steps` length-grouped batches of pair indices.

    Each epoch is a fresh permutation cut into windows of `group` batches; a window is
    sorted by length before it is cut into batches (little padding), and the batches of
    the epoch are shuffled. With `keys` (the pairs' sentence ids), no batch holds two pairs
    of one sentence: it would be its own negative. Pairs that do not fit wait for the next
    batch of the window; what is left at the end of an epoch is dropped. Index arrays
    throughout, never a Python object per pair: a 1M-pair snapshot starts in a second.
    """
    n_pairs = len(lengths)
    if n_pairs < batch_size:
        raise ValueError(
            f"the snapshot has {n_pairs} pairs, fewer than one batch of {batch_size}: lower train.batch_size"
        )
    sizes = np.asarray(lengths)
    codes = None if keys is None else key_codes(keys)
    rng = np.random.default_rng(seed)
    out: list[np.ndarray] = []
    while len(out) < steps:
        order = rng.permutation(n_pairs)
        epoch: list[np.ndarray] = []
        for start in range(0, n_pairs, batch_size * group):
            part = order[start : start + batch_size * group]
            epoch.extend(_cut(part[np.argsort(sizes[part], kind="stable")], batch_size, codes))
        if not epoch:
            raise ValueError(f"no batch of {batch_size} pairs with distinct sentences: lower train.batch_size")
        out.extend(epoch[i] for i in rng.permutation(len(epoch)))
    return [batch.tolist() for batch in out[:steps]]


def key_codes(keys: Sequence[Hashable] | pa.Array | pa.ChunkedArray) -> np.ndarray:
    """One integer per pair, equal where the keys are equal."""
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    array = keys if isinstance(keys, pa.Array) else pa.array(list(keys))
    return pc.dictionary_encode(array).indices.to_numpy(zero_copy_only=False)


def _cut(window: np.ndarray, batch_size: int, codes: np.ndarray | None) -> list[np.ndarray]:
    """Full batches of distinct keys from a length-sorted window; the rest is dropped."""
    if codes is None or np.unique(codes[window]).size == window.size:
        return list(window[: window.size // batch_size * batch_size].reshape(-1, batch_size))
    cut: list[np.ndarray] = []
    pending = window.tolist()
    while len(pending) >= batch_size:  # a window that repeats a key: fill each batch greedily
        batch: list[int] = []
        seen: set[int] = set()
        rest: list[int] = []
        for index in pending:
            if len(batch) < batch_size and codes[index] not in seen:
                batch.append(index)
                seen.add(codes[index])
            else:
                rest.append(index)
        if len(batch) < batch_size:
            break
        cut.append(np.array(batch))
        pending = rest
    return cut


def tokenize(tokenizer, texts: list[str], config: TrainConfig, device: str = "cpu") -> dict[str, torch.Tensor]:
    batch = tokenizer(texts, padding=True, truncation=True, max_length=config.max_length, return_tensors="pt")
    return {k: v.to(device) for k, v in batch.items()}
