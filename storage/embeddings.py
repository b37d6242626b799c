"""Texts' embeddings kept in the lake (table `embeddings`), keyed by encoder and text.

The meaning filter embeds every source and view of a recipe, and mining embeds the same texts
again a stage later with the same encoder (at 10k sentences of the full profile, 34 s of a
131 s run). The filter stores what it embeds (`PendingEmbeddings`: every text it asked the
encoder for, a few commits a shard, each dropping what is stored already), and mining reads what the lake
holds under its encoder through an `EmbeddingStore`, embedding (and storing) only the rest, so
a rerun with other mining controls embeds only new texts.

Why the lake and not the process: an embedding differs in its last bits with the batch it was
computed in, enough to swap near-tied mining candidates. A stored vector is the one every later
reader of the lake gets, so reruns on it mine the same negatives. Mining embeds what is missing
in fixed chunks in its own order, and every chunk is committed on its own, so a killed run
keeps what it committed.

The key is the encoder's identity (its weights' fingerprint and the precision it ran in) and the
text's xxh3-128 (a 64-bit hash would collide somewhere in a few billion texts, and a collision
would hand one text another's vector). Vectors are stored as the encoder returned them, float32,
not normalised; readers normalise. 1.5 KiB a text at MiniLM's 384 dimensions.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash
from viewmill.storage.lake import Lake, LakeError
from viewmill.storage.schema import EMBEDDINGS

Embed = Callable[[list[str]], np.ndarray]  # texts -> one row per text
NEW_TEXTS_PER_COMMIT = 4096  # a kill loses at most this many embeddings; the batches never depend on timing
# The meaning filter's pending embeddings are written past this many (24 MiB at MiniLM's 384
# dimensions): each write checks the encoder's stored keys once, so few large writes, not one a chunk.
PENDING_TEXTS = 16_384

logger = logging.getLogger("viewmill.embeddings")


def embedding_key(text: str) -> str:
    return xxhash.xxh3_128_hexdigest(text.encode("utf-8"))


def encoder_key(weights_fingerprint: str, precision: str) -> str:
    """The store's name for an encoder: the same weights under another autocast embed otherwise."""
    return f"{weights_fingerprint}+{precision}"


class EmbeddingStore:
    """`embed` through the lake: called with distinct texts, returns one float32 row per text,
    reading the rows the lake holds under `encoder` and embedding, then storing, only the others."""

    def __init__(self, lake: Lake, encoder: str, embed: Embed, *, chunk: int = NEW_TEXTS_PER_COMMIT) -> None:
        if chunk < 1:
            raise ValueError(f"chunk is {chunk}: embed at least one new text per commit")
        self.lake, self.encoder, self._embed, self._chunk = lake, encoder, embed, chunk
        self.hits = self.misses = 0

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        keys = pa.array((embedding_key(text) for text in texts), pa.string(), size=len(texts))
        if pc.count_distinct(keys).as_py() != len(keys):
            raise ValueError("the embedding store embeds distinct texts: give each text once")
        rows = _Matrix(len(texts), self.encoder)
        held = self._read(keys, rows) if len(texts) else np.zeros(0, dtype=bool)
        missing = np.flatnonzero(~held)
        self.hits, self.misses = self.hits + len(texts) - len(missing), self.misses + len(missing)
        for start in range(0, len(missing), self._chunk):  # the batches depend on what is missing only
            positions = missing[start : start + self._chunk]
            vectors = self._embedded([texts[i] for i in positions])
            with self.lake.transaction():  # the keys were just read as missing: no duplicate check
                self.lake.append("embeddings", embedding_rows(self.encoder, keys.take(positions), vectors))
            rows.put(positions, vectors)
        return rows.matrix()

    def _read(self, keys: pa.StringArray, rows: _Matrix) -> np.ndarray:
        """Fill the rows the lake holds, streamed (one scan of the table, however many texts);
        which rows it held. A text stored twice (two runs mining at once) reads as its first write."""
        written = np.full(len(keys), np.iinfo(np.int64).max, dtype=np.int64)  # microseconds since the epoch
        wanted = pa.table({"text_hash": keys, "position": np.arange(len(keys), dtype=np.int64)})
        with self.lake.with_keys("_embedding_keys", wanted):
            query = (
                "SELECT w.position, coalesce(epoch_us(e.created_at), 0) AS written, e.vector FROM embeddings e "
                "JOIN _embedding_keys w USING (text_hash) WHERE e.encoder = ?"
            )
            for batch in self.lake.batches(query, [self.encoder]):
                if not batch.num_rows:
                    continue
                positions, when = batch.column("position").to_numpy(), batch.column("written").to_numpy()
                order = np.lexsort((when, positions))  # per text, its first write in this batch
                first = order[np.unique(positions[order], return_index=True)[1]]
                first = first[when[first] < written[positions[first]]]  # and earlier than any batch before
                rows.put(positions[first], self._vectors(batch.column("vector"))[first])
                written[positions[first]] = when[first]
        return written != np.iinfo(np.int64).max

    def _vectors(self, lists: pa.ListArray) -> np.ndarray:
        """Stored lists as one float32 matrix, refused if any is not a finite vector of one width."""
        lengths = pc.list_value_length(lists).to_numpy(zero_copy_only=False)
        values = lists.flatten().to_numpy(zero_copy_only=False)
        width = int(lengths[0]) if not lists.null_count else 0
        if width == 0 or (lengths != width).any() or not np.isfinite(values).all():
            raise LakeError(
                f"the lake's embeddings under encoder {self.encoder} hold a vector that is null, empty, "
                "of another width than the others, or not finite: not written by viewmill as it is. "
                f"Drop them (`viewmill lake embeddings --drop {self.encoder}`) and rerun: they are embedded again"
            )
        return values.astype(np.float32, copy=False).reshape(len(lengths), width)

    def _embedded(self, texts: list[str]) -> np.ndarray:
        matrix = np.asarray(self._embed(texts), dtype=np.float32)
        if matrix.ndim != 2 or matrix.shape[0] != len(texts):
            raise ValueError(f"the encoder returned shape {matrix.shape} for {len(texts)} texts: one row per text")
        return matrix


class PendingEmbeddings:
    """Embeddings computed elsewhere (the meaning filter's), kept until `write` stores them in one
    commit that skips the keys the lake holds already. A text added twice keeps its first vector."""

    limit = PENDING_TEXTS  # `full` past this many distinct texts

    def __init__(self, encoder: str) -> None:
        self.encoder = encoder
        self._vectors: dict[str, np.ndarray] = {}  # text hash -> vector

    def __len__(self) -> int:
        return len(self._vectors)

    @property
    def full(self) -> bool:
        return len(self._vectors) >= self.limit

    def add(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        if len(texts) != len(vectors):
            raise ValueError(f"{len(texts)} texts and {len(vectors)} vectors: one vector per text")
        for text, vector in zip(texts, np.asarray(vectors, dtype=np.float32), strict=True):
            self._vectors.setdefault(embedding_key(text), vector)

    def write(self, lake: Lake) -> int:
        """Store what is pending in one commit (the duplicate check reads the encoder's keys once);
        the rows the lake did not hold. Nothing is pending afterwards."""
        if not self._vectors:
            return 0
        keys = pa.array(list(self._vectors), pa.string())
        rows = embedding_rows(self.encoder, keys, np.stack(list(self._vectors.values())))
        with lake.transaction():
            written = lake.append("embeddings", rows, unique_on=("encoder", "text_hash"))
        self._vectors.clear()
        return written

    @contextmanager
    def written_at_end(self, lake: Lake) -> Iterator[PendingEmbeddings]:
        """Write what is pending when the block ends, and also when it fails, so a shard's error
        (a retry in this process finds the texts in its encoder's cache) loses no vector: that
        write is best effort, logged if it fails too, and the block's own error goes on."""
        try:
            yield self
        except Exception:  # an interrupt goes straight through, as a kill does
            try:
                self.write(lake)
            except Exception as error:  # e.g. the lake's disk is what failed
                logger.warning("%d pending embeddings were not stored (%s); mining embeds them", len(self), error)
            raise
        self.write(lake)


def embedding_rows(encoder: str, keys: pa.StringArray, vectors: np.ndarray) -> pa.Table:
    """`embeddings` rows: one per key, its vector, written now."""
    width = vectors.shape[1]
    flat = pa.array(np.ascontiguousarray(vectors, dtype=np.float32).reshape(-1), pa.float32())
    offsets = pa.array(np.arange(0, (len(keys) + 1) * width, width, dtype=np.int32))
    return pa.table(
        {
            "encoder": pa.array([encoder] * len(keys), pa.string()),
            "text_hash": keys,
            "vector": pa.ListArray.from_arrays(offsets, flat),
            "created_at": pa.array([datetime.now(UTC)] * len(keys), EMBEDDINGS.field("created_at").type),
        },
        schema=EMBEDDINGS,
    )


def stored_encoders(lake: Lake) -> pa.Table:
    """Per encoder key: texts stored, their width and the vectors' bytes (from one vector: the
    column of every vector is not read), and when they were written."""
    try:
        return lake.arrow(
            "WITH keys AS (SELECT encoder, count(*) AS texts, min(created_at) AS first_written, "
            "max(created_at) AS last_written FROM embeddings GROUP BY encoder) "
            "SELECT encoder, texts, dims, texts * dims * 4 AS vector_bytes, first_written, last_written FROM keys, "
            "LATERAL (SELECT len(vector) AS dims FROM embeddings e WHERE e.encoder = keys.encoder LIMIT 1) "
            "ORDER BY encoder"
        )
    except duckdb.CatalogException:  # a lake no writer has opened since the table came
        return pa.table({"encoder": pa.array([], pa.string()), "texts": pa.array([], pa.int64())})


def drop_encoder(lake: Lake, encoder: str) -> int:
    """Delete every embedding stored under `encoder`, in one commit; how many. The table is
    partitioned by encoder, so its files go whole at the next `viewmill lake compact` past its
    time-travel window."""
    with lake.transaction():
        count = lake.scalar("SELECT count(*) FROM embeddings WHERE encoder = ?", [encoder])
        if not count:
            known = lake.arrow("SELECT DISTINCT encoder FROM embeddings ORDER BY encoder")["encoder"].to_pylist()
            raise LakeError(
                f"the lake stores no embeddings under encoder {encoder!r}: "
                f"stored ones are {', '.join(known) or 'none'} (viewmill lake embeddings)"
            )
        lake.con.execute("DELETE FROM embeddings WHERE encoder = ?", [encoder])
    return int(count)


class _Matrix:
    """Rows filled in any order; the width is the first vectors'."""

    def __init__(self, n: int, encoder: str) -> None:
        self._n, self._encoder = n, encoder
        self._rows: np.ndarray | None = None

    def put(self, positions: np.ndarray, vectors: np.ndarray) -> None:
        if self._rows is None:
            self._rows = np.empty((self._n, vectors.shape[1]), dtype=np.float32)
        elif vectors.shape[1] != self._rows.shape[1]:
            raise LakeError(
                f"embeddings stored under encoder {self._encoder} are {self._rows.shape[1]} wide and the encoder "
                f"gives {vectors.shape[1]}: drop them (`viewmill lake embeddings --drop {self._encoder}`) and rerun"
            )
        self._rows[positions] = vectors

    def matrix(self) -> np.ndarray:
        return self._rows if self._rows is not None else np.empty((0, 0), dtype=np.float32)
