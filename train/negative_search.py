"""The search behind mined hard negatives: each anchor's closest allowed candidates, exactly
in bounded blocks or from a faiss HNSW index, and the choice among them under a recipe's
controls (`train.mining.MinedNegatives`). The anchors' embeddings are gathered a block at a
time from the matrix that holds them, and the choice is made on arrays (`top` sampling
makes no Python object per anchor)."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:  # torch loads where mining runs, not where a recipe is read (2 s)
    import torch

HNSW_NEIGHBOURS = 32  # faiss HNSW's M: links per vector
HNSW_EF_SEARCH = 128  # the least search breadth (raised to twice the results asked for)
NO_SCORE = float("-inf")


class Controls(Protocol):
    """What decides the choice: `MinedNegatives`' controls."""

    per_anchor: int
    range_min: int
    max_score: float | None
    absolute_margin: float | None
    relative_margin: float | None
    sampling: str
    seed: int
    chunk_size: int

    def window_end(self) -> int: ...


class Rows:
    """Rows of a matrix picked by index, gathered a block at a time: a million anchors'
    embeddings are never copied whole beside the matrix that holds them."""

    def __init__(self, matrix: torch.Tensor, picked: Sequence[int] | torch.Tensor | None = None) -> None:
        import torch

        self.matrix = matrix
        self.picked = None if picked is None else torch.as_tensor(picked, dtype=torch.long)

    def __len__(self) -> int:
        return self.matrix.shape[0] if self.picked is None else len(self.picked)

    def block(self, rows: slice) -> torch.Tensor:
        return self.matrix[rows] if self.picked is None else self.matrix[self.picked[rows]]

    def blocks(self, size: int) -> Iterator[tuple[slice, torch.Tensor]]:
        for start in range(0, len(self), size):
            rows = slice(start, min(start + size, len(self)))
            yield rows, self.block(rows)


@dataclass(frozen=True)
class Exclusion:
    """The candidates an anchor may not take: those of its own sentence (the sentence and its
    views: false negatives by construction) and those with its or its positive's text."""

    anchor_group: torch.Tensor  # [anchors] the anchor's sentence, as a code
    candidate_group: torch.Tensor  # [candidates] each candidate's sentence, same codes
    anchor_text: torch.Tensor  # [anchors] the candidate with the anchor's text, -1: none
    positive_text: torch.Tensor  # [anchors] the candidate with the positive's text, -1: none

    def excluded(self, rows: slice, candidates: torch.Tensor) -> torch.Tensor:
        """[rows x width]: True where candidate `candidates[..., j]` ([width], or one row per
        anchor) is off limits to anchor `rows[i]`; index -1 (no candidate) counts as excluded."""
        picked = candidates if candidates.dim() == 2 else candidates.unsqueeze(0)
        out = self.candidate_group[picked.clamp(min=0)] == self.anchor_group[rows, None]
        out |= picked == self.anchor_text[rows, None]
        out |= picked == self.positive_text[rows, None]
        return out | (picked < 0)

    def most_per_anchor(self) -> int:
        """The most candidates any anchor excludes: how many more results an index must return."""
        import torch

        size = int(max(self.anchor_group.max(), self.candidate_group.max())) + 1
        per_group = torch.bincount(self.candidate_group, minlength=size)
        return int(per_group[self.anchor_group].max()) + 2


TopK = Callable[["Rows", "torch.Tensor", int, "Exclusion", int], tuple["torch.Tensor", "torch.Tensor"]]


def exact_top_k(
    anchors: Rows | torch.Tensor, candidates: torch.Tensor, k: int, exclusion: Exclusion, chunk_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each anchor's k best allowed candidates by dot product: scores [anchors x k], closest
    first, and their indices (-inf and -1 past the allowed ones). Blocks of chunk_size anchors
    x chunk_size candidates, merged into a running top-k: at most chunk_size x (chunk_size + k)
    scores exist at once, however large the corpus."""
    import torch

    anchors, n_candidates = _rows_of(anchors), candidates.shape[0]
    scores = torch.full((len(anchors), k), NO_SCORE)
    index = torch.full((len(anchors), k), -1, dtype=torch.long)
    for rows, anchor_block in anchors.blocks(chunk_size):
        best, best_index = scores[rows, :0], index[rows, :0]
        for c0 in range(0, n_candidates, chunk_size):
            columns = torch.arange(c0, min(c0 + chunk_size, n_candidates))
            block = anchor_block @ candidates[c0 : c0 + len(columns)].T
            block.masked_fill_(exclusion.excluded(rows, columns), NO_SCORE)
            merged = torch.cat([best, block], dim=1)
            merged_index = torch.cat([best_index, columns.expand(block.shape[0], -1)], dim=1)
            best, at = torch.topk(merged, min(k, merged.shape[1]), dim=1)
            best_index = merged_index.gather(1, at)
        scores[rows, : best.shape[1]], index[rows, : best.shape[1]] = best, best_index
    index[scores == NO_SCORE] = -1
    return scores, index


def faiss_top_k(
    anchors: Rows | torch.Tensor, candidates: torch.Tensor, k: int, exclusion: Exclusion, chunk_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """exact_top_k's result from a faiss HNSW index (inner product): approximate, for corpora
    too large to score every anchor against every candidate. It fetches as many extra results
    as an anchor can have excluded candidates, then drops those."""
    import faiss
    import torch

    index = faiss.IndexHNSWFlat(candidates.shape[1], HNSW_NEIGHBOURS, faiss.METRIC_INNER_PRODUCT)
    index.add(candidates.numpy())
    fetch = min(candidates.shape[0], k + exclusion.most_per_anchor())
    index.hnsw.efSearch = max(HNSW_EF_SEARCH, 2 * fetch)
    anchors = _rows_of(anchors)
    scores = torch.full((len(anchors), k), NO_SCORE)
    found = torch.full((len(anchors), k), -1, dtype=torch.long)
    for rows, anchor_block in anchors.blocks(chunk_size):
        block, block_index = (torch.from_numpy(a) for a in index.search(anchor_block.numpy(), fetch))
        block.masked_fill_(exclusion.excluded(rows, block_index.long()), NO_SCORE)
        best, at = torch.topk(block, min(k, fetch), dim=1)
        scores[rows, : best.shape[1]], found[rows, : best.shape[1]] = best, block_index.long().gather(1, at)
    found[scores == NO_SCORE] = -1
    return scores, found


SEARCHES: dict[str, TopK] = {"exact": exact_top_k, "faiss": faiss_top_k}


def _rows_of(vectors: Rows | torch.Tensor) -> Rows:
    return vectors if isinstance(vectors, Rows) else Rows(vectors)


def mine(
    anchors: Rows | torch.Tensor,
    positives: Rows | torch.Tensor,
    candidates: torch.Tensor,
    exclusion: Exclusion,
    controls: Controls,
    keys: Sequence[str],
    *,
    index: str = "exact",
) -> Mined:
    """The negatives of each anchor (unit vectors: dot product is cosine) under `controls`:
    per anchor, up to per_anchor candidates, closest first; `keys` (the pair ids) seed
    random sampling, so a pair's draw never depends on the others (`top` reads none)."""
    k = min(controls.window_end(), candidates.shape[0])
    anchors, positives = _rows_of(anchors), _rows_of(positives)
    scores, found = SEARCHES[index](anchors, candidates, k, exclusion, controls.chunk_size)
    positive = _positive_scores(anchors, positives, controls.chunk_size)
    window, window_index = scores[:, controls.range_min :], found[:, controls.range_min :]
    keep = window_index >= 0
    if controls.max_score is not None:
        keep &= window <= controls.max_score
    if controls.absolute_margin is not None:
        keep &= window + controls.absolute_margin <= positive
    if controls.relative_margin is not None:
        keep &= window <= positive - positive.abs() * controls.relative_margin
    allowed = keep.numpy()
    ranked = allowed.cumsum(axis=1, dtype=np.int32)  # an allowed candidate's place among the allowed
    if controls.sampling == "random":
        if len(keys) != len(anchors):
            raise ValueError(f"{len(keys)} keys for {len(anchors)} anchors: random sampling seeds each pair by its id")
        taken = _drawn(allowed, ranked, controls, keys)
    else:
        taken = allowed & (ranked <= controls.per_anchor)  # the closest per_anchor allowed
    anchor, column = np.nonzero(taken)  # by anchor, then closest first
    return Mined(len(anchors), anchor, window_index.numpy()[anchor, column], window.numpy()[anchor, column])


@dataclass(frozen=True)
class Mined:
    """The chosen negatives, flat: the anchor (its row), the candidate (its index) and their
    cosine, by anchor and closest first within one."""

    n_anchors: int
    anchor: np.ndarray
    candidate: np.ndarray
    score: np.ndarray

    def ranks(self) -> np.ndarray:
        """1 for an anchor's closest negative, 2 for the next, ..."""
        starts = np.searchsorted(self.anchor, self.anchor, side="left")
        return np.arange(len(self.anchor)) - starts + 1


def _drawn(allowed: np.ndarray, ranked: np.ndarray, controls: Controls, keys: Sequence[str]) -> np.ndarray:
    """Random sampling: per_anchor of an anchor's allowed candidates, drawn from the pair's own
    stream (`seed:pair id`); an anchor with no more than that takes them all."""
    taken = allowed.copy()
    counts = ranked[:, -1] if ranked.shape[1] else np.zeros(len(ranked), np.int64)
    for anchor in np.flatnonzero(counts > controls.per_anchor).tolist():
        columns = np.flatnonzero(allowed[anchor])
        drawn = random.Random(f"{controls.seed}:{keys[anchor]}").sample(range(len(columns)), controls.per_anchor)
        taken[anchor] = False
        taken[anchor, columns[drawn]] = True  # the mask keeps rank order
    return taken


def _positive_scores(anchors: Rows, positives: Rows, chunk_size: int) -> torch.Tensor:
    """[anchors x 1]: each anchor's cosine to its positive, a block at a time."""
    import torch

    out = torch.empty(len(anchors), 1, dtype=anchors.matrix.dtype)
    for rows, block in anchors.blocks(chunk_size):
        out[rows, 0] = (block * positives.block(rows)).sum(dim=1)
    return out
