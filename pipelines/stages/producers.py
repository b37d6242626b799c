"""Augmenters' producers reused within a process: built once per run, augmenter and lake, then
lent to the augment plan and to each shard the process runs (a Dask worker builds its own).

Building reads configuration only (weights load at the first batch, once per process:
`augment.models`), but it still costs: an HF engine loads its tokenizer and config and
fingerprints a local model folder. The run is part of the key because a data-derived producer
(entailment) fingerprints the lake's rows when it is built, and a later run may have added rows.
Preflight builds its own, without the lake (it runs before ingest).

A producer is lent to one shard at a time, and closed when given back, as a shard's own would
be: Apertium's tagger carries context from one sentence to the next, so a shard must start on a
fresh pipeline (closing stops it; the next batch starts another), alone, or its views would
depend on which shards ran before or beside it. Two shards at once in one process (a Dask
worker's threads) get two producers. Only an augmenter that declares its producer usable once
closed (`reusable_producer`, as viewmill's own do) is kept; any other is built for each use."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from viewmill.augment.augmenters import AugmenterConfig, Producer, make_producer
from viewmill.storage.ids import fingerprint
from viewmill.storage.lake import Lake

Key = tuple[str, str, str]  # run id, spec, lake

_lock = threading.Lock()
_idle: dict[Key, list[Producer]] = {}  # built, closed and not lent: one run's at a time


@contextmanager
def lent_producer(spec: AugmenterConfig, lake: Lake, run_id: str) -> Iterator[Producer]:
    """A producer of `spec` for the run, built with `lake` unless an idle one is there; closed
    and kept for the next user afterwards."""
    producer = _lend(spec, lake, run_id)
    try:
        yield producer
    finally:
        producer.close()


def release_producers() -> int:
    """Forget this process's idle producers (the run's augmenting is over); returns how many."""
    with _lock:
        count = sum(len(kept) for kept in _idle.values())
        _idle.clear()
    return count


def _lend(spec: AugmenterConfig, lake: Lake, run_id: str) -> Producer:
    if not type(spec).reusable_producer:
        return make_producer(spec, lake)  # built for this use only
    kind = f"{type(spec).__module__}.{type(spec).__qualname__}"
    key = (run_id, fingerprint(kind, spec.model_dump(mode="json")), f"{lake.root}|{lake.data_path}")
    with _lock:
        for old in [k for k in _idle if k[0] != run_id]:
            del _idle[old]  # an earlier run's (a worker outlives runs); already closed
        kept = _idle.get(key)
        producer = kept.pop() if kept else None
    return _Lent(producer or make_producer(spec, lake), key)


class _Lent:
    """A kept producer while lent: closing it closes the producer and gives it back."""

    def __init__(self, producer: Producer, key: Key) -> None:
        self._producer, self._key = producer, key

    def __getattr__(self, name: str) -> Any:  # identity, lang, produce: the producer's
        return getattr(self._producer, name)

    def close(self) -> None:
        self._producer.close()
        with _lock:
            if all(k[0] == self._key[0] for k in _idle):  # a later run has not started here
                _idle.setdefault(self._key, []).append(self._producer)
