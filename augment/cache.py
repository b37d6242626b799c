"""The translation cache: every translation keyed and stored in the lake, so reruns only fill gaps."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import pyarrow as pa
from viewmill.augment.commit_sizes import on_gpu
from viewmill.augment.engines import DecodingSpec, TranslationEngine
from viewmill.storage.ids import fingerprint, text_hash
from viewmill.storage.lake import Lake
from viewmill.storage.lake_writes import key_range
from viewmill.storage.schema import TRANSLATIONS

# New translations per commit where a neural engine's output depends on its batch: a kill loses
# at most this many, and the batches (hence the texts) never depend on timing. A GPU gets more
# to a batch (commit_sizes.GPU_FIXED_SENTENCES): 256 held an H200 to launch-bound batches.
BATCH_VARIANT_CHUNK = 256
GPU_BATCH_VARIANT_CHUNK = 2048


def batch_variant_chunk(device: str) -> int:
    """New translations per commit for a batch-dependent engine on `device`."""
    return GPU_BATCH_VARIANT_CHUNK if on_gpu(device) else BATCH_VARIANT_CHUNK


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0

    def add(self, other: CacheStats) -> None:
        self.hits += other.hits
        self.misses += other.misses


def cache_key(engine: TranslationEngine, src: str, tgt: str, decoding: DecodingSpec, source_text: str) -> str:
    return fingerprint(
        engine.name,
        engine.model,
        engine.revision,
        src,
        tgt,
        decoding.canonical(),
        decoding.seed,
        text_hash(source_text),
    )


def translate_cached(
    lake: Lake,
    engine: TranslationEngine,
    texts: list[str],
    src: str,
    tgt: str,
    decoding: DecodingSpec,
    *,
    run_id: str,
    chunk_size: int | None = BATCH_VARIANT_CHUNK,
    on_chunk: Callable[[int], None] | None = None,
) -> tuple[dict[str, tuple[str, str]], CacheStats]:
    """Translate unique `texts`, reading what the cache has and storing what it lacks.

    Returns {source text: (best hypothesis, cache key)} and hit/miss counts. Each chunk of
    `chunk_size` new translations is committed on its own, so a killed run keeps what it
    finished; None: one commit for all of them (the caller's chunk is already sized to about a
    second of work). A million sentences in chunks of 256 made thousands of small files, and
    every commit's catalog work grew with them.
    """
    unique = list(dict.fromkeys(texts))
    keys = {text: cache_key(engine, src, tgt, decoding, text) for text in unique}
    by_key = _cached(lake, engine, src, tgt, decoding, keys)
    missing = [text for text in unique if keys[text] not in by_key]
    stats = CacheStats(hits=len(unique) - len(missing), misses=len(missing))
    if on_chunk is not None and stats.hits:
        on_chunk(stats.hits)
    step = chunk_size or max(len(missing), 1)
    for start in range(0, len(missing), step):
        chunk = missing[start : start + step]
        hypotheses = engine.translate(chunk, src, tgt, decoding)
        rows = _translation_rows(engine, src, tgt, decoding, keys, chunk, hypotheses, run_id)
        with lake.transaction():
            lake.append(
                "translations", pa.Table.from_pylist(rows, schema=TRANSLATIONS), unique_on=("cache_key", "rank")
            )
        for text, hyps in zip(chunk, hypotheses, strict=True):
            by_key[keys[text]] = hyps[0]
        if on_chunk is not None:
            on_chunk(len(chunk))
    return {text: (by_key[keys[text]], keys[text]) for text in unique}, stats


def _cached(
    lake: Lake, engine: TranslationEngine, src: str, tgt: str, decoding: DecodingSpec, keys: dict[str, str]
) -> dict[str, str]:
    """{cache key: best hypothesis} for the cached ones of `keys` ({source text: key}), read
    only from files whose engine, direction and source-hash range can hold them (their
    catalog min/max), not the whole table: at a million sentences it holds 650k+ rows."""
    n = len(keys)
    sources = pa.table(
        {
            "engine": [engine.name] * n, "model": [engine.model] * n, "src_lang": [src] * n, "tgt_lang": [tgt] * n,
            "decoding": [decoding.canonical()] * n, "src_text_hash": [text_hash(text) for text in keys],
        }
    )  # fmt: skip
    where, params = key_range("translations", sources, ("cache_key",))
    wanted = pa.table({"cache_key": list(keys.values())})
    with lake.with_keys("_wanted", wanted):
        cached = lake.arrow(
            f"SELECT t.cache_key, t.text FROM (SELECT cache_key, text FROM translations WHERE rank = 0 AND {where}) t "
            "JOIN _wanted USING (cache_key)",
            params,
        )
    return dict(zip(cached["cache_key"].to_pylist(), cached["text"].to_pylist(), strict=True))


def _translation_rows(
    engine: TranslationEngine, src: str, tgt: str, decoding: DecodingSpec, keys: dict[str, str],
    chunk: list[str], hypotheses: list[list[str]], run_id: str,
) -> list[dict]:  # fmt: skip
    """`translations` rows: every hypothesis of each text, best first (rank 0)."""
    now = datetime.now(UTC)
    return [
        {
            "cache_key": keys[text],
            "engine": engine.name,
            "model": engine.model,
            "revision": engine.revision,
            "src_lang": src,
            "tgt_lang": tgt,
            "decoding": decoding.canonical(),
            "seed": decoding.seed,
            "src_text_hash": text_hash(text),
            "rank": rank,
            "text": hypothesis,
            "score": None,
            "run_id": run_id,
            "created_at": now,
        }
        for text, hyps in zip(chunk, hypotheses, strict=True)
        for rank, hypothesis in enumerate(hyps)
    ]
