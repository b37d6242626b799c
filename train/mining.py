"""Hard negatives mined with an encoder (a recipe's `pair.negatives` with `source: mined`).

For each pair, the candidates (the corpus's texts) are ranked by cosine similarity to the
pair's anchor, never counting the anchor's own sentence, its views, or a text equal to the
anchor or its positive. The controls are sentence-transformers' `mine_hard_negatives`
ones: a rank window [range_min, range_max) of that ranking, then a ceiling on the score
(max_score) and margins below the positive's score (absolute_margin, relative_margin),
then per_anchor negatives taken from what is left, the closest first (`top`) or at random
(`random`, seeded by the pair). The ranking is exact, computed in bounded blocks, or comes
from a faiss HNSW index (approximate) for large corpora.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Literal

import pyarrow as pa
from pydantic import Field, PrivateAttr, model_validator
from viewmill.storage.ids import canonical_json
from viewmill.storage.lake import Lake
from viewmill.storage.negatives import MINED_SOURCE, ROWS, NegativesSpec, candidate_sentences
from viewmill.train.encoder import encode_in, encoder_fingerprint, load_sentence_model, resolve_encoder

from viewmill.cpu import auto_precision
from viewmill.specs import Seed

if TYPE_CHECKING:  # torch loads where mining runs, not where a recipe is read (2 s)
    import torch

log = logging.getLogger(__name__)

AUTO_FAISS_CANDIDATES = 100_000  # index: auto searches an HNSW index from this many candidates on
HNSW_NEIGHBOURS = 32  # faiss HNSW's M: links per vector
HNSW_EF_SEARCH = 128  # the least search breadth (raised to twice the results asked for)
NO_SCORE = float("-inf")
MAX_RANK = 10_000_000  # range_min / range_max: a rank among the candidates

Chosen = list[list[tuple[int, float]]]  # per anchor: (candidate index, score), closest first


class MinedNegatives(NegativesSpec):
    """`pair.negatives` with `source: mined`: negatives an encoder finds close to each anchor."""

    source: Literal["mined"]
    encoder: str = Field("embedded:all-MiniLM-L6-v2", description="embedded:NAME or a model directory")
    per_anchor: int = Field(
        1, ge=1, le=1000, description="negatives per pair (num_negatives); pairs with fewer are dropped"
    )
    candidates: Literal["positives", "sentences"] = Field(
        "positives", description="the pairs' positives (as sentence-transformers mines), or every corpus sentence"
    )
    range_min: int = Field(0, ge=0, le=MAX_RANK, description="skip the anchor's range_min closest candidates")
    range_max: int | None = Field(
        None,
        ge=1,
        le=MAX_RANK,
        description="rank limit; default range_min + per_anchor, x10 when a filter or random sampling",
    )
    max_score: float | None = Field(None, description="drop candidates with a higher cosine to the anchor")
    absolute_margin: float | None = Field(None, description="keep candidates at least this below the positive")
    relative_margin: float | None = Field(
        None, ge=0, description="keep candidates below positive - |positive| x this (0.05: NV-Retriever's 95%)"
    )
    sampling: Literal["top", "random"] = "top"
    seed: Seed = Field(0, description="random sampling's seed (each pair draws from its own stream)")
    index: Literal["exact", "faiss", "auto"] = Field(
        "auto", description=f"auto: exact below {AUTO_FAISS_CANDIDATES:,} candidates, faiss (approximate) from there"
    )
    chunk_size: int = Field(
        1024, ge=1, le=1 << 20, description="exact search block: chunk_size x (chunk_size + range_max) scores"
    )
    batch_size: int = Field(64, ge=1, le=65536, description="texts per encoder batch")
    device: str = "cpu"
    _fingerprint: str | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _window_holds_the_negatives(self) -> MinedNegatives:
        end = self.window_end()
        if end <= self.range_min:
            raise ValueError(f"range_max ({end}) must be larger than range_min ({self.range_min})")
        if self.per_anchor > end - self.range_min:
            raise ValueError(
                f"per_anchor {self.per_anchor} does not fit ranks {self.range_min}..{end}: raise range_max "
                "or lower per_anchor"
            )
        return self

    def window_end(self) -> int:
        if self.range_max is not None:
            return self.range_max
        filtered = any(v is not None for v in (self.max_score, self.absolute_margin, self.relative_margin))
        room = 10 if filtered or self.sampling == "random" else 1
        return self.range_min + room * self.per_anchor

    def index_for(self, n_candidates: int) -> str:
        if self.index != "auto":
            return self.index
        return "faiss" if n_candidates >= AUTO_FAISS_CANDIDATES else "exact"

    def reads(self) -> tuple[str, ...]:
        return ("sentences",) if self.candidates == "sentences" else ()

    def reuse_key(self) -> dict:
        """The encoder (name and weights' fingerprint) and every control that decides the negatives."""
        if self._fingerprint is None:
            self._fingerprint = encoder_fingerprint(resolve_encoder(self.encoder))
        controls = self.model_dump(exclude={"source", "encoder", "chunk_size", "batch_size", "device"})
        key = {"encoder": self.encoder, "fingerprint": self._fingerprint, **controls, "range_max": self.window_end()}
        # bf16 scores may order near-tied candidates otherwise; fp32 keys stay what they were.
        return key if self.precision() == "fp32" else {**key, "precision": self.precision()}

    def precision(self) -> str:
        """The encoder's autocast: `auto` resolved as training resolves it for this device."""
        return auto_precision(self.device)

    def negatives(self, lake: Lake, pairs: pa.Table, corpus_version: str) -> pa.Table:
        candidates = candidate_sentences(lake, pairs, corpus_version, self.candidates)
        texts = Texts(candidates["text"].to_pylist(), pairs["text_a"].to_pylist(), pairs["text_b"].to_pylist())
        vectors = self._encode(texts.all)
        exclusion = texts.exclusion(candidates["sentence_id"].to_pylist(), pairs["sentence_id"].to_pylist())
        index = self.index_for(len(texts.candidates))
        log.info("mining %s negative(s) for %d pairs among %d candidates (%s search)",
                 self.per_anchor, pairs.num_rows, len(texts.candidates), index)  # fmt: skip
        chosen = mine(
            vectors[texts.anchor_rows], vectors[texts.positive_rows], vectors[: len(texts.candidates)],
            exclusion, self, pairs["pair_id"].to_pylist(), index=index,
        )  # fmt: skip
        miner = canonical_json({**self.reuse_key(), "index": index})
        return _rows(pairs["pair_id"].to_pylist(), chosen, candidates, miner)

    def _encode(self, texts: list[str]) -> torch.Tensor:
        model = load_sentence_model(resolve_encoder(self.encoder), device=self.device)
        return encode_in(
            model, texts, self.precision(), self.device, batch_size=self.batch_size, normalize_embeddings=True
        )


@dataclass(frozen=True)
class Texts:
    """Every text mining encodes, each once: the candidates first (a candidate's index is its
    text's), then the anchors' and positives' texts that are no candidate."""

    candidates: list[str]
    anchors: list[str]
    positives: list[str]

    @cached_property
    def position(self) -> dict[str, int]:
        return {text: i for i, text in enumerate(dict.fromkeys([*self.candidates, *self.anchors, *self.positives]))}

    @property
    def all(self) -> list[str]:
        return list(self.position)

    @cached_property
    def anchor_rows(self) -> list[int]:
        return [self.position[t] for t in self.anchors]

    @cached_property
    def positive_rows(self) -> list[int]:
        return [self.position[t] for t in self.positives]

    def exclusion(self, candidate_sentences: list[str], anchor_sentences: list[str]) -> Exclusion:
        import torch

        codes = {sid: i for i, sid in enumerate(dict.fromkeys([*candidate_sentences, *anchor_sentences]))}
        n = len(self.candidates)
        as_candidate = [[i if i < n else -1 for i in rows] for rows in (self.anchor_rows, self.positive_rows)]
        return Exclusion(
            anchor_group=torch.tensor([codes[s] for s in anchor_sentences], dtype=torch.long),
            candidate_group=torch.tensor([codes[s] for s in candidate_sentences], dtype=torch.long),
            anchor_text=torch.tensor(as_candidate[0], dtype=torch.long),
            positive_text=torch.tensor(as_candidate[1], dtype=torch.long),
        )


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


TopK = Callable[["torch.Tensor", "torch.Tensor", int, "Exclusion", int], tuple["torch.Tensor", "torch.Tensor"]]


def exact_top_k(
    anchors: torch.Tensor, candidates: torch.Tensor, k: int, exclusion: Exclusion, chunk_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each anchor's k best allowed candidates by dot product: scores [anchors x k], closest
    first, and their indices (-inf and -1 past the allowed ones). Blocks of chunk_size anchors
    x chunk_size candidates, merged into a running top-k: at most chunk_size x (chunk_size + k)
    scores exist at once, however large the corpus."""
    import torch

    n_anchors, n_candidates = anchors.shape[0], candidates.shape[0]
    scores = torch.full((n_anchors, k), NO_SCORE)
    index = torch.full((n_anchors, k), -1, dtype=torch.long)
    for a0 in range(0, n_anchors, chunk_size):
        rows = slice(a0, min(a0 + chunk_size, n_anchors))
        best, best_index = scores[rows, :0], index[rows, :0]
        for c0 in range(0, n_candidates, chunk_size):
            columns = torch.arange(c0, min(c0 + chunk_size, n_candidates))
            block = anchors[rows] @ candidates[c0 : c0 + len(columns)].T
            block.masked_fill_(exclusion.excluded(rows, columns), NO_SCORE)
            merged = torch.cat([best, block], dim=1)
            merged_index = torch.cat([best_index, columns.expand(block.shape[0], -1)], dim=1)
            best, at = torch.topk(merged, min(k, merged.shape[1]), dim=1)
            best_index = merged_index.gather(1, at)
        scores[rows, : best.shape[1]], index[rows, : best.shape[1]] = best, best_index
    index[scores == NO_SCORE] = -1
    return scores, index


def faiss_top_k(
    anchors: torch.Tensor, candidates: torch.Tensor, k: int, exclusion: Exclusion, chunk_size: int
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
    n_anchors = anchors.shape[0]
    scores = torch.full((n_anchors, k), NO_SCORE)
    found = torch.full((n_anchors, k), -1, dtype=torch.long)
    for a0 in range(0, n_anchors, chunk_size):
        rows = slice(a0, min(a0 + chunk_size, n_anchors))
        block, block_index = (torch.from_numpy(a) for a in index.search(anchors[rows].numpy(), fetch))
        block.masked_fill_(exclusion.excluded(rows, block_index.long()), NO_SCORE)
        best, at = torch.topk(block, min(k, fetch), dim=1)
        scores[rows, : best.shape[1]], found[rows, : best.shape[1]] = best, block_index.long().gather(1, at)
    found[scores == NO_SCORE] = -1
    return scores, found


SEARCHES: dict[str, TopK] = {"exact": exact_top_k, "faiss": faiss_top_k}


def mine(
    anchors: torch.Tensor,
    positives: torch.Tensor,
    candidates: torch.Tensor,
    exclusion: Exclusion,
    controls: MinedNegatives,
    keys: Sequence[str],
    *,
    index: str = "exact",
) -> Chosen:
    """The negatives of each anchor (unit vectors: dot product is cosine) under `controls`:
    per anchor, up to per_anchor (candidate index, score), closest first; `keys` (the pair
    ids) seed random sampling, so a pair's draw never depends on the others."""
    k = min(controls.window_end(), candidates.shape[0])
    scores, found = SEARCHES[index](anchors, candidates, k, exclusion, controls.chunk_size)
    positive = (anchors * positives).sum(dim=1, keepdim=True)
    window, window_index = scores[:, controls.range_min :], found[:, controls.range_min :]
    keep = window_index >= 0
    if controls.max_score is not None:
        keep &= window <= controls.max_score
    if controls.absolute_margin is not None:
        keep &= window + controls.absolute_margin <= positive
    if controls.relative_margin is not None:
        keep &= window <= positive - positive.abs() * controls.relative_margin
    return [
        _pick([(i, s) for i, s, ok in zip(ids, values, oks, strict=True) if ok], controls, key)
        for ids, values, oks, key in zip(window_index.tolist(), window.tolist(), keep.tolist(), keys, strict=True)
    ]


def _pick(allowed: list[tuple[int, float]], controls: MinedNegatives, key: str) -> list[tuple[int, float]]:
    if controls.sampling == "top" or len(allowed) <= controls.per_anchor:
        return allowed[: controls.per_anchor]
    drawn = random.Random(f"{controls.seed}:{key}").sample(range(len(allowed)), controls.per_anchor)
    return [allowed[i] for i in sorted(drawn)]


def _rows(pair_ids: list[str], chosen: Chosen, candidates: pa.Table, miner: str) -> pa.Table:
    picks = [(pair_id, rank, i, score) for pair_id, found in zip(pair_ids, chosen, strict=True)
             for rank, (i, score) in enumerate(found, start=1)]  # fmt: skip
    taken = pa.array([i for _, _, i, _ in picks], pa.int64())
    columns = {
        "pair_id": [p[0] for p in picks],
        "rank": [p[1] for p in picks],
        "sentence_id": candidates["sentence_id"].take(taken),
        "text": candidates["text"].take(taken),
        "source": [MINED_SOURCE] * len(picks),
        "miner": [miner] * len(picks),
        "score": [p[3] for p in picks],
    }
    return pa.table(columns).cast(ROWS)
