"""The hashes that name pairs and snapshots: a pair's id, and a snapshot's content hash.

Both are part of the lake's data (snapshot names come from the content hash), so their
definitions never change; the vectorised paths here give exactly the bytes of the plain ones
and fall back to them for any value they cannot be sure of.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import xxhash
from viewmill.storage.ids import canonical_json, fingerprint
from viewmill.storage.negatives import NEGATIVE_COLUMNS

# What training reads of a pair (and its languages): the content hash covers exactly these.
HASHED_COLUMNS = ("pair_id", "sentence_id", "text_a", "text_b", "lang_a", "lang_b")
HASH_BATCH = 65536  # rows per hashed block: part of the hash's definition, never change it
PAIR_ID_PARTS = ("sentence_id", "view_a_id", "view_b_id")
# orjson writes strings, integers and nulls byte for byte as canonical_json does (tested);
# floats it may spell differently (1e16 against 1e+16), so a block with one is hashed the plain way.
_ORJSON_TYPES = (pa.types.is_string, pa.types.is_large_string, pa.types.is_integer, pa.types.is_null)
_QUOTE, _BACKSLASH = ord('"'), ord("\\")
_SEPARATOR = np.frombuffer(b'","', np.uint8)


def pairs_content_hash(recipe: str, pairs: pa.Table, negatives: pa.Table | None = None) -> str:
    """Hash of the recipe and every pair's ids, texts and languages, in pair_id order, then
    (a snapshot with hard negatives) every negative row by pair and rank: two snapshots with
    the same hash hand training the same bytes. Without negatives, the hash snapshots always had."""
    digest = xxhash.xxh3_128(canonical_json(recipe).encode("utf-8"))
    hashed = pairs.select(list(HASHED_COLUMNS))
    _hash_rows(digest, hashed if _ascending(hashed["pair_id"]) else hashed.sort_by("pair_id"))
    if negatives is not None:
        digest.update(b"negatives")
        order = [("pair_id", "ascending"), ("rank", "ascending")]
        _hash_rows(digest, negatives.select(list(NEGATIVE_COLUMNS)).sort_by(order))
    return digest.hexdigest()


def _ascending(values: pa.ChunkedArray) -> bool:
    """Whether the values strictly ascend (a read that ordered them by pair_id): one vectorised
    comparison, where sorting them again would take a single-threaded sort."""
    values = values.combine_chunks()
    if values.null_count or len(values) < 2:
        return not values.null_count
    return bool(pc.all(pc.less(values[:-1], values[1:])).as_py())


def _hash_rows(digest: Any, ordered: pa.Table) -> None:
    # One chunk first, so batch boundaries (and the hash) never depend on how the rows arrived.
    for batch in ordered.combine_chunks().to_batches(max_chunksize=HASH_BATCH):
        digest.update(block_json(batch))


def block_json(batch: pa.RecordBatch) -> bytes:
    """canonical_json of the batch's columns as lists, UTF-8 encoded (what the hash covers):
    the outer list's items are the columns' own JSON, so each column is written on its own."""
    if not all(any(kind(column.type) for kind in _ORJSON_TYPES) for column in batch.columns):
        return canonical_json([column.to_pylist() for column in batch.columns]).encode("utf-8")
    return b"[" + b",".join(_column_json(column) for column in batch.columns) + b"]"


def _column_json(column: pa.Array) -> bytes:
    """One column's JSON list: a string column with no nulls and no control characters is
    written from its bytes (twice as fast as Python strings for texts); any other by orjson."""
    buffers = column.buffers()
    if pa.types.is_string(column.type) and not column.null_count and len(column) and buffers[2] is not None:
        offsets = np.frombuffer(buffers[1], np.int32, len(column) + 1, column.offset * 4)
        data = np.frombuffer(buffers[2], np.uint8)[offsets[0] : offsets[-1]]
        if not (data < 0x20).any():  # UTF-8 multi-byte sequences hold no byte < 0x80
            return _strings_json(data, offsets - offsets[0])
    return orjson.dumps(column.to_pylist())


def _strings_json(data: np.ndarray, offsets: np.ndarray) -> bytes:
    """`["a","b",...]` from the strings' bytes back to back: a backslash before each `"` and
    `\\`, then `","` between strings."""
    special = np.flatnonzero((data == _QUOTE) | (data == _BACKSLASH))
    if len(special):
        data = np.insert(data, special, _BACKSLASH)
        offsets = offsets + np.searchsorted(special, offsets)
    between = np.repeat(offsets[1:-1], 3)  # equal indices: the separator's bytes go in in order
    joined = np.insert(data, between, np.tile(_SEPARATOR, len(offsets) - 2))
    return b'["' + joined.tobytes() + b'"]'


def legacy_content_hash(recipe: str, pairs: pa.Table) -> str:
    """The hash snapshots made before texts were hashed carry (ids only, in pairing order)."""
    ordered = pairs.sort_by([("sentence_id", "ascending"), ("view_b_id", "ascending")])
    return fingerprint(recipe, ordered["pair_id"].to_pylist())


def pair_ids(pairs: pa.Table) -> pa.Array:
    """Each pair's id: fingerprint(sentence_id, view_a_id, view_b_id). Ids are lowercase hex,
    whose JSON needs no escaping, so the fingerprinted text is joined by Arrow; any other id
    takes the plain path."""
    parts = [pairs[name].combine_chunks() for name in PAIR_ID_PARTS]
    if not all(_plain_hex(part) for part in parts):
        columns = (part.to_pylist() for part in parts)
        return pa.array([fingerprint(s, a, b) for s, a, b in zip(*columns, strict=True)], pa.string())
    sentence, view_a, view_b = parts
    texts = pc.binary_join_element_wise('["', sentence, '","', view_a, '","', view_b, '"]', "")
    digest = xxhash.xxh3_128_hexdigest
    return pa.array([digest(text) for text in texts.cast(pa.binary()).to_pylist()], pa.string())


def _plain_hex(values: pa.Array) -> bool:
    if values.null_count or not pa.types.is_string(values.type):
        return False
    return bool(pc.all(pc.match_substring_regex(values, "^[0-9a-f]*$")).as_py())
