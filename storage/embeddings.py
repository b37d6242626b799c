"""Texts' embeddings kept in the lake (table `embeddings`), keyed by encoder and text.

The meaning filter embeds every source and view of a recipe, and mining embeds the same texts
again a stage later with the same encoder (at 10k sentences of the full profile, 97 s of a 277 s
run). Both go through an `EmbeddingStore`: a text already in the lake under that encoder is
read, not embedded, so mining reuses the filter's work and a rerun with other mining controls
embeds only new texts.

Why the lake and not the process: an embedding differs in its last bits with the batch it was
computed in, enough to swap near-tied mining candidates. A stored vector is the one every later
reader gets, so reruns stay identical. New texts are embedded and committed in fixed chunks, in
the caller's order, so which texts share a batch never depends on timing, and a killed run keeps
every chunk it committed.

The key is the encoder's identity (its weights' fingerprint and the precision it ran in) and the
text's xxh3-128 (a 64-bit hash would collide somewhere in a few billion texts, and a collision
would hand one text another's vector). Vectors are stored as the encoder returned them, float32,
not normalised; readers normalise. 1.5 KiB a text at MiniLM's 384 dimensions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash
from viewmill.storage.lake import Lake, LakeError
from viewmill.storage.schema import EMBEDDINGS

Embed = Callable[[list[str]], np.ndarray]  # texts -> one row per text
NEW_TEXTS_PER_COMMIT = 4096  # a kill loses at most this many embeddings; the batches never depend on timing
TEXTS_PER_READ = 65_536  # keys looked up in one query: a million texts' keys are not registered at once


def embedding_key(text: str) -> str:
    return xxhash.xxh3_128_hexdigest(text.encode("utf-8"))


def encoder_key(weights_fingerprint: str, precision: str) -> str:
    """The store's name for an encoder: the same weights under another autocast embed otherwise."""
    return f"{weights_fingerprint}+{precision}"


class EmbeddingStore:
    """`embed` through the lake: called with texts, returns one float32 row per text, reading
    the rows the lake holds under `encoder` and embedding (then storing) only the others."""

    def __init__(self, lake: Lake, encoder: str, embed: Embed, chunk: int = NEW_TEXTS_PER_COMMIT) -> None:
        if chunk < 1:
            raise ValueError(f"chunk is {chunk}: embed at least one new text per commit")
        self.lake, self.encoder, self._embed, self._chunk = lake, encoder, embed, chunk
        self.hits = self.misses = 0

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        unique = list(dict.fromkeys(texts))
        keys = [embedding_key(text) for text in unique]
        rows = _Matrix(len(unique))
        missing: list[int] = []
        for start in range(0, len(unique), TEXTS_PER_READ):
            found = self._read(keys[start : start + TEXTS_PER_READ], start, rows)
            missing += [i for i in range(start, min(start + TEXTS_PER_READ, len(unique))) if not found[i - start]]
        self.hits += len(unique) - len(missing)
        self.misses += len(missing)
        for start in range(0, len(missing), self._chunk):
            positions = missing[start : start + self._chunk]
            vectors = self._embedded([unique[i] for i in positions])
            self._write([keys[i] for i in positions], vectors)
            rows.put(np.asarray(positions), vectors)
        matrix = rows.matrix()
        if len(unique) == len(texts):  # distinct texts come back in their own order, uncopied
            return matrix
        position = {text: i for i, text in enumerate(unique)}
        return matrix[[position[text] for text in texts]]

    def _read(self, keys: list[str], first: int, rows: _Matrix) -> np.ndarray:
        """Fill the rows of `keys` the lake holds; which of them it held."""
        wanted = pa.table({"text_hash": pa.array(keys, pa.string()), "position": np.arange(len(keys), dtype=np.int64)})
        with self.lake.with_keys("_embedding_keys", wanted):
            found = self.lake.arrow(
                "SELECT w.position, e.vector FROM embeddings e JOIN _embedding_keys w USING (text_hash) "
                "WHERE e.encoder = ?",
                [self.encoder],
            )
        held = np.zeros(len(keys), dtype=bool)
        if found.num_rows:
            positions = found["position"].to_numpy()
            rows.put(positions + first, self._vectors(found["vector"]))
            held[positions] = True
        return held

    def _vectors(self, column: pa.ChunkedArray) -> np.ndarray:
        """The stored lists as one float32 matrix, refused if any is not a finite vector of one width."""
        lists = column.combine_chunks()
        lengths = pc.list_value_length(lists).to_numpy(zero_copy_only=False)
        width = int(lengths[0])
        values = lists.flatten().to_numpy(zero_copy_only=False)
        if lists.null_count or width == 0 or (lengths != width).any() or not np.isfinite(values).all():
            raise LakeError(
                f"the lake's embeddings under encoder {self.encoder} hold a vector that is null, empty, "
                "of another width than the others, or not finite: not written by viewmill as it is. Delete "
                f"them (`viewmill lake attach --read-write`, then DELETE FROM embeddings WHERE encoder = "
                f"'{self.encoder}') and rerun: they are embedded again"
            )
        return values.astype(np.float32, copy=False).reshape(len(lengths), width)

    def _embedded(self, texts: list[str]) -> np.ndarray:
        matrix = np.asarray(self._embed(texts), dtype=np.float32)
        if matrix.ndim != 2 or matrix.shape[0] != len(texts):
            raise ValueError(f"the encoder returned shape {matrix.shape} for {len(texts)} texts: one row per text")
        return matrix

    def _write(self, keys: list[str], vectors: np.ndarray) -> None:
        width = vectors.shape[1]
        flat = pa.array(np.ascontiguousarray(vectors).reshape(-1), pa.float32())
        offsets = pa.array(np.arange(0, (len(keys) + 1) * width, width, dtype=np.int32))
        rows = pa.table(
            {
                "encoder": pa.array([self.encoder] * len(keys), pa.string()),
                "text_hash": pa.array(keys, pa.string()),
                "vector": pa.ListArray.from_arrays(offsets, flat),
                "created_at": pa.array([datetime.now(UTC)] * len(keys), EMBEDDINGS.field("created_at").type),
            },
            schema=EMBEDDINGS,
        )
        with self.lake.transaction():
            self.lake.append("embeddings", rows, unique_on=("encoder", "text_hash"))


class _Matrix:
    """Rows filled in any order; the width is the first vectors'."""

    def __init__(self, n: int) -> None:
        self._n = n
        self._rows: np.ndarray | None = None

    def put(self, positions: np.ndarray, vectors: np.ndarray) -> None:
        if self._rows is None:
            self._rows = np.empty((self._n, vectors.shape[1]), dtype=np.float32)
        elif vectors.shape[1] != self._rows.shape[1]:
            raise LakeError(
                f"stored embeddings are {self._rows.shape[1]} wide and the encoder's {vectors.shape[1]}: "
                "one encoder key must not hold two widths"
            )
        self._rows[positions] = vectors

    def matrix(self) -> np.ndarray:
        return self._rows if self._rows is not None else np.empty((0, 0), dtype=np.float32)
