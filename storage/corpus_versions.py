"""Corpus versions: which sentences a corpus holds after an ingest, named by a hash of their ids.

A version is `fingerprint(corpus, sorted ids)`; here it is computed a million ids at a time
over their JSON text, and the members are written a million at a time, so recording the
version of a corpus of tens of millions of sentences needs neither a Python list of its ids
nor one JSON text of them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash
from viewmill.storage.hex_ids import hex_ids
from viewmill.storage.ids import canonical_json
from viewmill.storage.lake import Lake
from viewmill.storage.schema import CORPUS_MEMBERS, CORPUS_VERSIONS

CHUNK = 1 << 18
_NEEDS_ESCAPE = r'["\\\x00-\x1f]'  # what JSON escapes in a string (ensure_ascii off)


def record_corpus_version(lake: Lake, corpus: str, sentence_ids: Sequence[str] | np.ndarray, run_id: str) -> str:
    """Record which sentences the corpus holds after this ingest; returns the version (a hash of
    the sorted ids). Sentences stay in `sentences` when a corpus shrinks, but a version lists
    only the current ones, so pairing a version never pairs a sentence the corpus lost.

    `sentence_ids`: the ids as text, or as 64-bit values (ingest's hashes; any order, repeats allowed)."""
    ids = _SortedIds(sentence_ids)
    version = corpus_version(corpus, ids)
    with lake.transaction():
        if lake.scalar("SELECT count(*) FROM corpus_versions WHERE corpus_version = ?", [version]):
            return version  # the same ids again: members and version are already recorded
        members = pa.RecordBatchReader.from_batches(CORPUS_MEMBERS, _members(corpus, version, ids))
        lake.append("corpus_members", members)
        row = {"corpus": corpus, "corpus_version": version, "n_sentences": len(ids), "run_id": run_id,
               "created_at": datetime.now(UTC)}  # fmt: skip
        lake.append("corpus_versions", pa.Table.from_pylist([row], schema=CORPUS_VERSIONS))
    return version


def corpus_version(corpus: str, ids: _SortedIds) -> str:
    """`fingerprint(corpus, ids)`, the JSON text hashed a chunk at a time."""
    head = canonical_json([corpus, []])[:-2]  # '["corpus",[' ... ']]'
    digest = xxhash.xxh3_128(head.encode("utf-8"))
    first = True
    for chunk in ids.chunks():
        if not first:
            digest.update(b",")
        digest.update(_json_items(chunk))
        first = False
    digest.update(b"]]")
    return digest.hexdigest()


class _SortedIds:
    """Distinct ids in the order of their text, handed out a chunk at a time as Arrow strings."""

    def __init__(self, ids: Sequence[str] | np.ndarray) -> None:
        if isinstance(ids, np.ndarray):
            self._hashes, self._texts = _distinct(ids.astype(np.uint64)), None
        else:
            texts = pc.unique(pa.array(ids, pa.string()))
            self._hashes, self._texts = None, texts.take(pc.sort_indices(texts))  # UTF-8 bytes sort as code points

    def __len__(self) -> int:
        return len(self._hashes) if self._hashes is not None else len(self._texts)

    def chunks(self) -> Iterator[pa.Array]:
        for start in range(0, len(self), CHUNK):
            if self._hashes is not None:
                yield hex_ids(self._hashes[start : start + CHUNK])
            else:
                yield self._texts.slice(start, CHUNK)


def _distinct(hashes: np.ndarray) -> np.ndarray:
    """Sorted and without repeats (hex order is numeric order). `np.unique` takes a hash table
    path for these that is some 50x slower than a sort at millions of ids."""
    if len(hashes) < 2 or bool((hashes[1:] > hashes[:-1]).all()):
        return hashes  # already sorted and distinct (ingest's ids are): no copy
    ordered = np.sort(hashes)
    return ordered[np.concatenate([[True], ordered[1:] != ordered[:-1]])]


def _json_items(chunk: pa.Array) -> bytes:
    """The chunk's strings as JSON array items, comma-separated, as `canonical_json` writes them."""
    if pc.any(pc.match_substring_regex(chunk, _NEEDS_ESCAPE)).as_py():
        return ",".join(json.dumps(text, ensure_ascii=False) for text in chunk.to_pylist()).encode("utf-8")
    quoted = pc.binary_join_element_wise('"', chunk, '",', "")
    offsets = np.frombuffer(quoted.buffers()[1], np.int32, len(quoted) + 1, quoted.offset * 4)
    return np.frombuffer(quoted.buffers()[2], np.uint8)[offsets[0] : offsets[-1] - 1].tobytes()


def _members(corpus: str, version: str, ids: _SortedIds) -> Iterator[pa.RecordBatch]:
    for chunk in ids.chunks():
        repeat = len(chunk)
        columns = [pa.repeat(pa.scalar(corpus), repeat), pa.repeat(pa.scalar(version), repeat), chunk]
        yield pa.RecordBatch.from_arrays(columns, schema=CORPUS_MEMBERS)
