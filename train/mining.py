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

import functools
import logging
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Literal

import numpy as np
import pyarrow as pa
from pydantic import Field, PrivateAttr, model_validator
from viewmill.storage.embeddings import EmbeddingStore, encoder_key
from viewmill.storage.ids import canonical_json
from viewmill.storage.lake import Lake
from viewmill.storage.negatives import MINED_SOURCE, ROWS, NegativesSpec, candidate_sentences
from viewmill.train.encoder import encode_in, encoder_fingerprint, load_sentence_model, resolve_encoder
from viewmill.train.negative_search import HNSW_NEIGHBOURS, Exclusion, Mined, Rows, mine

from viewmill.cpu import auto_precision
from viewmill.specs import Seed

if TYPE_CHECKING:  # torch loads where mining runs, not where a recipe is read (2 s)
    import torch

log = logging.getLogger(__name__)

AUTO_FAISS_CANDIDATES = 100_000  # index: auto searches an HNSW index from this many candidates on
MAX_RANK = 10_000_000  # range_min / range_max: a rank among the candidates
# Per vector in faiss's HNSW index beside the vector itself: its base level's 2M links of 4 bytes,
# and 16 for its level, its offset and its share of the upper levels' links (272 at M = 32, as
# faiss's serialised index measures).
HNSW_LINKS_BYTES = 2 * HNSW_NEIGHBOURS * 4 + 16


# What Python holds per text while mining lays its texts out (`Texts`, its exclusion), an upper
# bound fitted with tracemalloc (tests/train/test_mining.py): each candidate's, anchor's and
# positive's string (a 49-byte header and a list slot, plus a byte a character for Latin-1
# text), and per candidate and anchor the position and sentence-code dicts' entries (their
# tables grow by doubling: 12% less at some sizes), the sentence id's string and the row lists.
PY_STR_BYTES = 57
PY_ROW_BYTES = 208
EXACT_CELL_BYTES = 20  # per score of the exact search's block: float32 scores, int64 indices, masks


@dataclass(frozen=True)
class MiningShape:
    """The sizes one mining worked on: distinct texts embedded, candidates searched, anchors
    (pairs), the embeddings' width, and the texts' mean length in characters."""

    texts: int
    candidates: int
    anchors: int
    dims: int
    text_chars: float = 0.0

    def scaled(self, factor: float) -> MiningShape:
        """The same recipe on `factor` times the corpus (every count grows with it)."""
        counts = (round(n * factor) for n in (self.texts, self.candidates, self.anchors))
        return MiningShape(*counts, self.dims, self.text_chars)

    def layout_bytes(self) -> int:
        """Python's copies of the texts and the tensors that say which candidate is whose."""
        strings = (self.candidates + 2 * self.anchors) * (PY_STR_BYTES + self.text_chars)
        rows = (self.candidates + self.anchors) * PY_ROW_BYTES
        return round(strings + rows + 8 * (self.candidates + 3 * self.anchors))


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
    store: bool = Field(
        True,
        description="keep the texts' embeddings in the lake (table embeddings, 1.5 KiB a text at 384 dimensions): "
        "mining then reads what the meaning filter or an earlier mining embedded with this encoder",
    )
    _fingerprint: str | None = PrivateAttr(None)
    _shape: MiningShape | None = PrivateAttr(None)

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
        """Tables mining reads beside pairing's, checked against their recorded hashes first."""
        return (*(("sentences",) if self.candidates == "sentences" else ()), *(("embeddings",) if self.store else ()))

    def reuse_key(self) -> dict:
        """The encoder (name and weights' fingerprint) and every control that decides the negatives."""
        controls = self.model_dump(exclude={"source", "encoder", "chunk_size", "batch_size", "device", "store"})
        key = {"encoder": self.encoder, "fingerprint": self._weights(), **controls, "range_max": self.window_end()}
        if self.store:  # stored vectors, normalised after: their last bits differ from one encode's
            key["embeddings"] = "lake"
        # bf16 scores may order near-tied candidates otherwise.
        return key if self.precision() == "fp32" else {**key, "precision": self.precision()}

    def precision(self) -> str:
        """The encoder's autocast: `auto` resolved as training resolves it for this device."""
        return auto_precision(self.device)

    def embedding_key(self) -> str:
        """The lake's embedding store's name for this encoder (the meaning filter's, if it shares it)."""
        return encoder_key(self._weights(), self.precision())

    def _weights(self) -> str:
        if self._fingerprint is None:
            self._fingerprint = encoder_fingerprint(resolve_encoder(self.encoder))
        return self._fingerprint

    @property
    def last_shape(self) -> MiningShape | None:
        """The sizes of this spec's last mining in this process (None: it has not mined)."""
        return self._shape

    def memory_bytes(self, shape: MiningShape) -> int:
        """What mining `shape` holds at once, the bound docs/lake.md states: the texts laid out;
        every text's float32 embedding; the exact search's block or faiss's index; each anchor's
        ranked window (a float32 score and an int64 index a rank)."""
        vector = shape.dims * 4
        if self.index_for(shape.candidates) == "faiss":
            search = shape.candidates * (vector + HNSW_LINKS_BYTES)
        else:
            search = self.chunk_size * (self.chunk_size + self.window_end()) * EXACT_CELL_BYTES
        return shape.layout_bytes() + shape.texts * vector + search + shape.anchors * self.window_end() * 12

    def negatives(self, lake: Lake, pairs: pa.Table, corpus_version: str) -> pa.Table:
        self._shape = None
        candidates = candidate_sentences(lake, pairs, corpus_version, self.candidates)
        texts = Texts(candidates["text"].to_pylist(), pairs["text_a"].to_pylist(), pairs["text_b"].to_pylist())
        every = texts.all
        vectors = self._encode(lake, every)
        chars = sum(map(len, every)) / max(len(every), 1)
        self._shape = MiningShape(len(vectors), len(texts.candidates), pairs.num_rows, int(vectors.shape[1]), chars)
        exclusion = texts.exclusion(candidates["sentence_id"].to_pylist(), pairs["sentence_id"].to_pylist())
        index = self.index_for(len(texts.candidates))
        log.info("mining %s negative(s) for %d pairs among %d candidates (%s search)",
                 self.per_anchor, pairs.num_rows, len(texts.candidates), index)  # fmt: skip
        keys = pairs["pair_id"].to_pylist() if self.sampling == "random" else ()  # only draws read them
        mined = mine(
            Rows(vectors, texts.anchor_rows), Rows(vectors, texts.positive_rows), vectors[: len(texts.candidates)],
            exclusion, self, keys, index=index,
        )  # fmt: skip
        miner = canonical_json({**self.reuse_key(), "index": index})
        return _rows(pairs["pair_id"], mined, candidates, miner)

    def _encode(self, lake: Lake | None, texts: list[str]) -> torch.Tensor:
        """Unit vectors of the distinct `texts`. With `store`, read from the lake where it holds
        them (the encoder loads only if some text is new) and normalised afterwards; without,
        the encoder embeds and normalises every text as it always did."""
        import torch

        # Loaded at the first text to embed (none where the store holds them all), dropped with this call.
        model = functools.cache(lambda: load_sentence_model(resolve_encoder(self.encoder), device=self.device))

        if not self.store:
            return encode_in(model(), texts, self.precision(), self.device, batch_size=self.batch_size,
                             normalize_embeddings=True)  # fmt: skip

        def embed(batch: list[str]) -> np.ndarray:
            return encode_in(model(), batch, self.precision(), self.device, batch_size=self.batch_size).numpy()

        store = EmbeddingStore(lake, self.embedding_key(), embed)
        vectors = torch.from_numpy(store(texts))
        log.info("mining's embeddings: %d read from the lake, %d embedded", store.hits, store.misses)
        return vectors.div_(vectors.norm(dim=1, keepdim=True).clamp_min(1e-12))  # in place: no second copy


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


def _rows(pair_ids: pa.ChunkedArray, mined: Mined, candidates: pa.Table, miner: str) -> pa.Table:
    """The `pair_negatives` rows of what was mined, by pair and rank."""
    taken = pa.array(mined.candidate, pa.int64())
    every = pa.array(np.zeros(len(mined.anchor), np.int64))  # one value on every row, as Arrow repeats it
    columns = {
        "pair_id": pair_ids.take(pa.array(mined.anchor, pa.int64())),
        "rank": pa.array(mined.ranks(), pa.int32()),
        "sentence_id": candidates["sentence_id"].take(taken),
        "text": candidates["text"].take(taken),
        "source": pa.array([MINED_SOURCE]).take(every),
        "miner": pa.array([miner]).take(every),
        "score": pa.array(mined.score.astype(np.float64)),
    }
    return pa.table(columns).cast(ROWS)
