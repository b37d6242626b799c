"""What `viewmill plan` measures on this machine: each stage's real code on a sample of the
recipe's corpus, in a scratch lake (a temporary folder), never the run's lake; the run's lake is
only read (the translation cache and the views a rerun would reuse).

Time and peak memory are taken around each measurement (`Watch`): peak memory is the resident
set of this process and the processes it started (an engine's), sampled while the measurement
runs, so it includes what earlier measurements left loaded (an upper bound for the stage)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pyarrow as pa
from viewmill.augment.augmenter_base import ProduceContext
from viewmill.augment.augmenters import AugmenterSpec, make_producer
from viewmill.augment.cache import CacheStats
from viewmill.augment.commit_sizes import MIN_SENTENCES
from viewmill.augment.embedding_cache import Embed
from viewmill.augment.meaning import MeaningJudge
from viewmill.augment.quality import FilterSpec
from viewmill.augment.views import (
    config_hash,
    corpus_sentences,
    fixed_commit_size,
    make_shard_views,
    views_present,
)
from viewmill.pipelines.context import RunContext
from viewmill.pipelines.stages.augment import recipe_judge
from viewmill.storage.lake import Lake
from viewmill.train.encoder import load_sentence_model, resolve_encoder
from viewmill.train.step_timing import TrainMeasure, time_training

from viewmill.memory import Watch

WARMUP_TEXTS = 8  # texts a model translates or embeds before it is timed (its load and first call)
# The filter's call-size speed-up is measured on at most this many texts each way (a few seconds
# on a CPU); larger calls gain little more (BENCHMARKS.md, "The meaning filter's chunk").
MAX_MEASURED_CALL = 4096


@dataclass
class AugmenterMeasure:
    """One augmenter on the sample: seconds per sentence outside the lake (`view_s`: the views
    code with every translation cached; `engine_s`: what translating anew adds), the lake's
    seconds per commit of each kind (what a run amortises over commits of its own size), and the
    run's lake's coverage of it (what a rerun reuses)."""

    name: str
    engine: str
    sentences: int
    load_s: float  # building the producer and its first texts (a neural engine loads its weights)
    view_s: float  # per sentence: the real views code with every translation cached (filters, rows;
    # the meaning filter's share at the run's call size: `meaning_call_speedup`)
    engine_s: float  # per sentence: what translating it anew adds
    peak_rss: int
    view_commit_s: float = 0.0  # the lake's seconds per views commit (cache lookup, write, catalog)
    translation_commit_s: float = 0.0  # the lake's seconds per commit of new translations
    fixed_commit: int | None = None  # sentences per views commit where not sized by time
    translation_chunk: int | None = None  # new translations per commit; None: one per views commit
    cache_hits: float | None = None  # share of the sample's translation cache keys the run's lake holds
    views_present: float = 0.0  # share of the sample's sentences that have this augmenter's view already
    meaning_texts_per_s: float | None = None  # the meaning filter's embedding rate
    meaning_s: float = 0.0  # per sentence: the meaning filter's embedding, at the sample's call size
    meaning_call_texts: float = 0.0  # texts a call of the filter's encoder on the sample, on average
    meaning_call_speedup: float = 1.0  # its encoder in the run's calls (the fixed chunk) against the sample's
    config: str = ""  # its configuration hash in the scratch lake (pairing names views by it)


@dataclass
class _Phase:
    """A measured call: its seconds, the lake's share of them, and the lake commits it made."""

    seconds: float = 0.0
    lake_s: float = 0.0
    commits: int = 0

    @classmethod
    def run(cls, lake: Lake, call: Callable[[], object]) -> _Phase:
        lake_before, version = lake.busy_seconds(), lake.version()
        t0 = time.perf_counter()
        call()
        seconds = time.perf_counter() - t0
        return cls(seconds, lake.busy_seconds() - lake_before, lake.version() - version)

    @property
    def outside_lake(self) -> float:
        return max(self.seconds - self.lake_s, 0.0)


def _produce(producer: Any, chunk: list[tuple[str, str]], lake: Lake, run_id: str, size: int) -> None:
    ctx = ProduceContext(lake, run_id, CacheStats())
    for start in range(0, len(chunk), size):
        producer.produce(chunk[start : start + size], ctx)


@dataclass
class _Embedded:
    texts: int = 0
    seconds: float = 0.0
    calls: int = 0


def timed_judge(judge: MeaningJudge | None, tally: _Embedded) -> MeaningJudge | None:
    """The judge, its embedding timed into `tally` (after one warm-up call that loads the encoder)."""
    if judge is None:
        return None
    judge.embed(["warm up the meaning encoder"])

    def embed(texts: list[str]):
        t0 = time.perf_counter()
        vectors = judge.embed(texts)
        tally.texts, tally.seconds = tally.texts + len(texts), tally.seconds + time.perf_counter() - t0
        tally.calls += 1
        return vectors

    return replace(judge, embed=embed)


def measure_augmenter(ctx: RunContext, lake: Lake, spec: AugmenterSpec, judge: MeaningJudge | None) -> AugmenterMeasure:
    """`spec` on the scratch `lake`'s sample: the producer's texts translated with an empty cache
    (after a warm-up), again with all of them cached, then the real views code (`make_shard_views`)."""
    recipe, chunk_size = ctx.recipe, ctx.recipe.execution.chunk_sentences
    # What the producer is given at once: the fixed chunk (a GPU's larger one), or an adaptive shard's first.
    batch = fixed_commit_size(spec, recipe.filters, chunk_size) or MIN_SENTENCES
    run_id = augmenter_run(ctx, spec)  # the scratch cache's rows say which augmenter asked for them
    rows = [(sid, text) for sid, text, _ in corpus_sentences(lake, recipe.corpus_name)]
    head, rest = rows[:WARMUP_TEXTS], rows[WARMUP_TEXTS:] or rows
    with Watch() as watch:
        producer = make_producer(spec, lake)
        try:
            load = _Phase.run(lake, lambda: _produce(producer, head, lake, run_id, batch))
            cold = _Phase.run(lake, lambda: _produce(producer, rest, lake, run_id, batch))
            warm = _Phase.run(lake, lambda: _produce(producer, rows, lake, run_id, batch))
            translation_chunk = getattr(producer, "commit_chunk", None)
        finally:
            producer.close()
        tally = _Embedded()
        judged = timed_judge(judge, tally)
        make = lambda: make_shard_views(lake, recipe.corpus_name, spec, recipe.filters,  # noqa: E731
                                        run_id=run_id, chunk_size=chunk_size, judge=judged)  # fmt: skip
        views = _Phase.run(lake, make)
    n = max(len(rows), 1)
    engine_s = max(cold.outside_lake / len(rest) - warm.outside_lake / n, 0.0)
    # The cold pass's lake work beyond the warm pass's lookups is its commits of new translations.
    translation_commit_s = max(cold.lake_s - warm.lake_s * len(rest) / n, 0.0) / cold.commits if cold.commits else 0.0
    return AugmenterMeasure(
        spec.name, getattr(spec, "engine", None) or spec.method, len(rows), load.seconds, views.outside_lake / n,
        engine_s, watch.peak, view_commit_s=views.lake_s / max(views.commits, 1),
        translation_commit_s=translation_commit_s, fixed_commit=fixed_commit_size(spec, recipe.filters, chunk_size),
        translation_chunk=translation_chunk,
        meaning_texts_per_s=tally.texts / tally.seconds if tally.seconds else None, meaning_s=tally.seconds / n,
        meaning_call_texts=tally.texts / tally.calls if tally.calls else 0.0,
    )  # fmt: skip


def measure_augmenters(ctx: RunContext, lake: Lake | None) -> list[AugmenterMeasure]:
    """Every augmenter in the recipe's order (the meaning filter's near-duplicate check reads the
    earlier ones' views), each with what the run's `lake` (None: no lake yet) already holds of it."""
    recipe, chunk_size = ctx.recipe, ctx.recipe.execution.chunk_sentences
    judge = recipe_judge(recipe)
    measures, scratch_configs, real_configs = [], [], []
    with ctx.lake() as scratch:  # opened once: each opening of a lake costs seconds on a busy machine
        ids = scratch.arrow("SELECT sentence_id FROM sentences")["sentence_id"].to_pylist()
        for spec in recipe.augmenters:
            earlier = None if judge is None else replace(judge, earlier=tuple(scratch_configs))
            measures.append(measure_augmenter(ctx, scratch, spec, earlier))
            scratch_configs.append(planned_config(spec, recipe.filters, chunk_size, scratch, judge, scratch_configs[:]))
            measures[-1].config = scratch_configs[-1]
            keys = scratch.arrow("SELECT DISTINCT cache_key FROM translations WHERE run_id = ?",
                                 [augmenter_run(ctx, spec)])  # fmt: skip
            _covered(measures[-1], spec, recipe.filters, chunk_size, lake, ids, keys, judge, real_configs)
        if judge is not None:
            texts = scratch.arrow("SELECT text FROM sentences")["text"].to_pylist()
            _at_run_call_size(measures, judge.embed, texts, recipe.execution.shard_sentences)
    return measures


def _at_run_call_size(measures: list[AugmenterMeasure], embed: Embed, texts: list[str], shard: int) -> None:
    """The filter embeds a chunk's texts a call: the sample's few hundred where the run's chunk
    holds thousands (within a shard of `shard` sentences), and the encoder sorts each call by
    length, so larger calls pad less (1.2x on a CPU at 2,048, BENCHMARKS.md). Each filtered
    augmenter's `view_s` takes its embedding at the run's call size: the sample's average call
    scaled by the run's chunk over the sample, measured once for the recipe (one encoder)."""
    filtered = [m for m in measures if m.meaning_s and m.meaning_call_texts and m.fixed_commit]
    if not filtered:
        return
    small = round(sum(m.meaning_call_texts for m in filtered) / len(filtered))
    scale = min(filtered[0].fixed_commit, shard) / filtered[0].sentences
    speedup = call_size_speedup(embed, texts, small, min(round(small * scale), MAX_MEASURED_CALL))
    for m in filtered:
        m.meaning_call_speedup = speedup
        m.view_s -= m.meaning_s * (1 - 1 / speedup)


def call_size_speedup(embed: Embed, texts: list[str], small: int, large: int) -> float:
    """How much faster `embed` takes `large` texts in one call than in calls of `small`: texts
    made from `texts` with a 7-digit number appended (the corpus's lengths, the same tokens in
    both, none in the encoder's cache). At least 1: a larger call costs no more a text."""
    if not texts or small < 1 or large <= small:
        return 1.0

    def timed(calls: list[list[str]]) -> float:
        began = time.perf_counter()
        for call in calls:
            embed(call)
        return time.perf_counter() - began

    in_one = timed([[f"{texts[i % len(texts)]} {1_000_000 + i}" for i in range(large)]])
    others = [f"{texts[i % len(texts)]} {2_000_000 + i}" for i in range(large)]
    in_small = timed([others[start : start + small] for start in range(0, large, small)])
    return max(in_small / in_one, 1.0) if in_one > 0 else 1.0


def _covered(measure: AugmenterMeasure, spec: AugmenterSpec, filters: FilterSpec, chunk_size: int | None,
             lake: Lake | None, ids: list[str], keys: pa.Table, judge: MeaningJudge | None,
             real_configs: list[str]) -> None:  # fmt: skip
    """What the run's `lake` (None: none yet) holds of the augmenter's work on the sample: the
    sentences with its view, the translation cache keys it asked for."""
    measure.cache_hits = 0.0 if keys.num_rows else None  # no lake yet: nothing cached
    if lake is None:
        return
    config = planned_config(spec, filters, chunk_size, lake, judge, real_configs[:])
    real_configs.append(config)
    measure.views_present = len(views_present(lake, ids, config)) / max(len(ids), 1)
    measure.cache_hits = cached_share(lake, keys)


def augmenter_run(ctx: RunContext, spec: AugmenterSpec) -> str:
    return f"{ctx.run_id}.{spec.name}"


def planned_config(
    spec: AugmenterSpec,
    filters: FilterSpec,
    chunk_size: int | None,
    lake: Lake,
    judge: MeaningJudge | None,
    earlier: list[str],
) -> str:
    """The augmenter's configuration hash as the run names it (a shard job checks the same)."""
    producer = make_producer(spec, lake)
    try:
        judged = None if judge is None else replace(judge, earlier=tuple(earlier))
        return config_hash(spec, filters, producer, judged, chunk_size)
    finally:
        producer.close()


def cached_share(lake: Lake, keys: pa.Table) -> float | None:
    """The share of translation cache `keys` the lake holds (None: the augmenter translates nothing)."""
    if not keys.num_rows:
        return None
    with lake.with_keys("_plan_keys", keys):
        found = lake.scalar(
            "SELECT count(DISTINCT t.cache_key) FROM translations t JOIN _plan_keys USING (cache_key) WHERE t.rank = 0"
        )
    return int(found) / keys.num_rows


def measure_training(ctx: RunContext, pairs: pa.Table, device: str, out: Path) -> TrainMeasure:
    """A few steps of the recipe's objective, batch size and max length on the sample's `pairs`."""
    spec = ctx.recipe.train
    assert spec is not None
    return time_training(spec, resolve_encoder(spec.encoder), pairs, device, out, card={"recipe": ctx.recipe.name})


@dataclass
class EncodeMeasure:
    """The training encoder embedding the sample, as evaluation and dev scoring embed."""

    device: str
    load_s: float
    texts_per_s: float
    peak_rss: int


def measure_encoding(ctx: RunContext, texts: list[str], device: str) -> EncodeMeasure:
    spec, evaluate = ctx.recipe.train, ctx.recipe.evaluate
    assert spec is not None
    batch = evaluate.batch_size if evaluate is not None else 64
    with Watch() as watch:
        t0 = time.perf_counter()
        model = load_sentence_model(resolve_encoder(spec.encoder), device=device)
        model.encode(texts[:WARMUP_TEXTS], batch_size=batch, show_progress_bar=False)
        t1 = time.perf_counter()
        model.encode(texts, batch_size=batch, show_progress_bar=False)
        rate = len(texts) / max(time.perf_counter() - t1, 1e-9)
    return EncodeMeasure(device, t1 - t0, rate, watch.peak)
