"""`viewmill plan`: what a recipe's run will cost on this machine, before it runs.

The recipe is checked as a run checks it (preflight), the corpus is counted by streaming it
through ingest's reader and filters (no lake write), then every stage's real code runs on a
sample of it in a scratch lake (`plan_measure`). Each stage's estimate is its fixed cost
measured on the sample plus its per-item cost times the corpus's items; augmentation's
per-sentence cost is what is new only: the sentences the run's lake has no view of, their
translations not in its cache. The run's lake is opened read-only, if it exists."""

from __future__ import annotations

import math
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from viewmill.augment.commit_sizes import commits_for
from viewmill.augment.ingest.readers import READERS
from viewmill.augment.models import release_models
from viewmill.pipelines.context import RunContext
from viewmill.pipelines.plan_measure import (
    AugmenterMeasure,
    EncodeMeasure,
    measure_augmenters,
    measure_encoding,
    measure_training,
)
from viewmill.pipelines.recipe import Recipe
from viewmill.pipelines.stages.ingest import corpus_stream, ingest_stage
from viewmill.pipelines.stages.pair import pair_stage
from viewmill.pipelines.stages.preflight import preflight
from viewmill.pipelines.stages.producers import release_producers
from viewmill.pipelines.state import StatePaths
from viewmill.storage.catalog import Catalog
from viewmill.storage.lake import Lake
from viewmill.storage.snapshots import read_pairs
from viewmill.train.encoder import resolve_encoder
from viewmill.train.evaluation.senteval import TransferTask, load_transfer
from viewmill.train.evaluation.sts import load_task
from viewmill.train.mining import MinedNegatives, MiningShape
from viewmill.train.soup import candidate_weights
from viewmill.train.step_timing import TrainMeasure

from viewmill.allocator import allocator_label
from viewmill.memory import Watch
from viewmill.settings import Settings

DEFAULT_SAMPLE = 300
NO_GPU = "unmeasured (no GPU here)"
# Pairing's per-pair cost (the join, pair ids, the content hash, the write) is too small to time
# on a few hundred pairs: taken at what a 863k-pair snapshot measured on 2 AVX2 cores
# (BENCHMARKS.md, 117k pairs/s), and said so.
PAIR_ROWS_PER_S = 120_000
# Sources larger than this are not counted but estimated (`size_corpus`); they read at ingest's
# speed otherwise (BENCHMARKS.md: 330k-602k sentences/s of text).
ESTIMATE_BYTES = 4 * 2**30
PREFIX_SENTENCES = 100_000  # kept sentences read to estimate the share ingest keeps
PREFIX_BYTES = 16 * 2**20  # bytes read to estimate bytes per line
LINE_FORMATS = ("text", "nli-jsonl", "csv")  # one record per line


@dataclass(frozen=True)
class StageEstimate:
    stage: str
    rows: int
    seconds: float  # this machine, one process
    peak_rss: int  # bytes
    workers_seconds: float  # on N Dask workers
    workers_peak_rss: int  # bytes, all workers together
    gpu_seconds: float | None  # None: no GPU measured
    note: str


@dataclass(frozen=True)
class Plan:
    recipe: str
    sentences: int  # the corpus after the recipe's limit and filters
    counted: str  # how `sentences` was found
    sample: int  # sentences measured
    workers: int
    gpu: str  # the GPU measured, or NO_GPU
    augmenters: list[AugmenterMeasure]
    stages: list[StageEstimate]
    allocator: str = field(default_factory=allocator_label)  # memory measured on it (viewmill.allocator)

    @property
    def total(self) -> StageEstimate:
        gpu = [s.gpu_seconds if s.gpu_seconds is not None else s.seconds for s in self.stages]
        return StageEstimate(
            "total", sum(s.rows for s in self.stages), sum(s.seconds for s in self.stages),
            max(s.peak_rss for s in self.stages), sum(s.workers_seconds for s in self.stages),
            max(s.workers_peak_rss for s in self.stages), sum(gpu) if self.gpu != NO_GPU else None, "",
        )  # fmt: skip

    def as_dict(self) -> dict[str, Any]:
        """The plan as JSON: the same numbers the table shows, seconds and bytes."""
        fields = {k: v for k, v in asdict(self).items() if k not in ("stages", "augmenters")}
        return {
            **fields,
            "augmenters": [asdict(a) for a in self.augmenters],
            "stages": [_stage_dict(s) for s in self.stages],
            "total": _stage_dict(self.total),
        }


def _stage_dict(stage: StageEstimate) -> dict[str, Any]:
    row = asdict(stage)
    row["gpu_seconds"] = NO_GPU if stage.gpu_seconds is None else stage.gpu_seconds
    return row


@dataclass
class Measures:
    """Everything timed on the sample."""

    preflight: Watch
    corpus: Watch
    ingest: Watch
    sample: int
    augmenters: list[AugmenterMeasure]
    pair: Watch
    pairs: int
    train: dict[str, TrainMeasure]  # by device
    encode: dict[str, EncodeMeasure]  # by device
    dev_texts: int = 0
    eval_texts: int = 0
    pair_bytes: float = 0.0  # a pair's bytes in Arrow, as pairing holds them and training reads them
    mining: MiningShape | None = None  # the sample's mining, where negatives are mined


def plan_recipe(recipe: Recipe, state: StatePaths, settings: Settings, *, sample: int = DEFAULT_SAMPLE,
                workers: int = 1, estimate_bytes: int = ESTIMATE_BYTES) -> Plan:  # fmt: skip
    """Check, count and measure the recipe (nothing written to its lake), then estimate each stage."""
    ctx = RunContext(recipe, state, settings)
    with Watch() as checked:
        preflight(ctx)  # bad input is refused as a run refuses it
    with Watch() as counted:
        sentences, how = size_corpus(ctx, estimate_bytes)
    gpu = gpu_name()
    with tempfile.TemporaryDirectory(prefix="viewmill-plan-") as scratch, run_lake(ctx) as lake:
        try:
            found = measure(scratch_context(ctx, Path(scratch), sample), lake, checked, counted, gpu != NO_GPU)
        finally:  # the sample's weights and producers are not the run's
            release_models()
            release_producers()
    stages = estimate(recipe, found, sentences, workers)
    evaluated = [s for s in stages if s.stage == "evaluate"]  # last, as in the run: after any soup
    stages = [s for s in stages if s.stage != "evaluate"]

    def named_stages(named: Recipe) -> list[StageEstimate]:  # a named recipe's run, in the same state; not evaluated
        part = plan_recipe(named, state, settings, sample=sample, workers=workers, estimate_bytes=estimate_bytes)
        return [replace(s, stage=f"{named.name}: {s.stage}") for s in part.stages if s.stage != "evaluate"]

    start = recipe.start_recipe()
    if start is not None:  # runs after this recipe's pairing, before its training
        at = next((i for i, s in enumerate(stages) if s.stage == "train"), len(stages))
        stages[at:at] = named_stages(start)
    for ingredient in recipe.soup_recipes():  # after this recipe's training
        stages += named_stages(ingredient)
    if recipe.soup is not None and "cpu" in found.encode:
        stages.append(soup_estimate(recipe, found))
    return Plan(recipe.name, sentences, how, found.sample, workers, gpu, found.augmenters, stages + evaluated)


def count_sentences(ctx: RunContext) -> int:
    """The sentences ingest would keep: the corpus read as ingest reads it, nothing written."""
    stream = corpus_stream(ctx)
    for _ in stream.batches():
        pass
    return stream.stats.kept


def size_corpus(ctx: RunContext, estimate_bytes: int = ESTIMATE_BYTES) -> tuple[int, str]:
    """The corpus's sentences and how they were found: counted, or for sources of more than
    `estimate_bytes` in a one-record-per-line format (or Parquet), estimated from its records
    (file bytes over a prefix's bytes per line, or Parquet's row counts) times the share of a
    prefix's records that ingest keeps (duplicates past the prefix are not seen)."""
    corpus = ctx.recipe.corpus
    files = [Path(f) for f in corpus.files]
    total = sum(f.stat().st_size for f in files) if READERS[corpus.format].reads_files else 0
    small_limit = corpus.limit is not None and corpus.limit <= PREFIX_SENTENCES
    if total <= estimate_bytes or small_limit or corpus.format not in (*LINE_FORMATS, "parquet"):
        return count_sentences(ctx), "counted (every source streamed through ingest's filters)"
    stream = corpus_stream(replace(ctx, recipe=limited(ctx.recipe, PREFIX_SENTENCES)))
    for _ in stream.batches():
        pass
    if corpus.format == "parquet":
        records = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    else:
        with files[0].open("rb") as head:
            block = head.read(PREFIX_BYTES)
        records = total * max(block.count(b"\n"), 1) // max(len(block), 1)
    kept = round(records * stream.stats.kept / max(stream.stats.lines, 1))
    return min(kept, corpus.limit or kept), (
        f"estimated from {total / 2**30:,.1f} GiB of sources and a {stream.stats.lines:,}-record prefix"
    )


def gpu_name() -> str:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else NO_GPU


@contextmanager
def run_lake(ctx: RunContext) -> Iterator[Lake | None]:
    """The run's lake, read-only; None where it does not exist yet (nothing is cached)."""
    catalog = Catalog.parse(ctx.settings.catalog_spec(), ctx.state.lake)
    if not catalog.exists():
        yield None
        return
    with ctx.lake(read_only=True) as lake:
        yield lake


def limited(recipe: Recipe, sentences: int) -> Recipe:
    """The recipe with its corpus cut to its first `sentences` kept sentences, and negatives of
    its own (a fresh spec: what its mining records is the sample's, and the caller's is left alone)."""
    corpus, negatives = recipe.corpus, recipe.pair.negatives
    if negatives is not None:
        negatives = type(negatives).model_validate(negatives.model_dump())
    return recipe.model_copy(
        update={
            "corpus": corpus.model_copy(update={"limit": min(corpus.limit or sentences, sentences)}),
            "pair": recipe.pair.model_copy(update={"negatives": negatives}),
        }
    )


def scratch_context(ctx: RunContext, folder: Path, sample: int) -> RunContext:
    """The recipe on its first `sample` sentences, in a lake of its own under `folder` (a local
    catalog and data path, whatever the run's settings name)."""
    recipe = limited(ctx.recipe, sample)
    settings = Settings(state_dir=folder, catalog="sqlite", data_path=str(folder / "lake" / "data"))
    return RunContext(recipe, StatePaths(folder), settings, run_id=ctx.run_id)


def measure(ctx: RunContext, lake: Lake | None, checked: Watch, counted: Watch, gpu: bool) -> Measures:
    """Every stage's real code on the scratch context's sample."""
    recipe = ctx.recipe
    with Watch() as ingested:
        report = ingest_stage(ctx)
    augmenters = measure_augmenters(ctx, lake)
    configs = {a.name: a.config for a in augmenters}
    with Watch() as paired:
        snapshot = pair_stage(ctx, [(configs[a], configs[b]) for a, b in recipe.pair.pairs], report.corpus_version)
    found = Measures(checked, counted, ingested, report.sentences, augmenters, paired, snapshot.n_pairs, {}, {})
    found.mining = recipe.pair.negatives.last_shape if isinstance(recipe.pair.negatives, MinedNegatives) else None
    if not snapshot.n_pairs:
        return found
    with ctx.lake(read_only=True) as scratch:
        pairs = read_pairs(scratch, snapshot.name)
    found.pair_bytes = pairs.nbytes / pairs.num_rows
    if recipe.train is None:
        return found
    for device in ("cpu", "cuda") if gpu else ("cpu",):
        found.train[device] = measure_training(ctx, pairs, device, ctx.state.models / device)
        found.encode[device] = measure_encoding(ctx, pairs["text_a"].to_pylist(), device)
        release_models()
    found.dev_texts = task_texts(recipe.train.dev_tasks)
    found.eval_texts = task_texts(recipe.evaluate.tasks) if recipe.evaluate is not None else 0
    return found


def task_texts(tasks: list[Any]) -> int:
    """The distinct texts evaluation embeds for `tasks` (one model embeds a text once)."""
    texts: set[str] = set()
    for task in tasks:
        if isinstance(task, TransferTask):
            for split in load_transfer(task).values():
                for text in split.texts:
                    texts.update(text if isinstance(text, tuple) else (text,))
        else:
            for data in load_task(task).values():
                texts.update(data.s1)
                texts.update(data.s2)
    return len(texts)


def estimate(recipe: Recipe, found: Measures, sentences: int, workers: int) -> list[StageEstimate]:
    """Each stage's seconds and peak memory for the whole corpus, here and on `workers` Dask workers."""
    scale = sentences / max(found.sample, 1)
    read = found.ingest.seconds + found.corpus.seconds
    read_peak = max(found.ingest.peak, found.corpus.peak)
    stages = [
        _alone("preflight", 0, found.preflight.seconds, found.preflight.peak, "checks inputs; reads a sample"),
        _alone("ingest", sentences, read, read_peak, "one streaming read of the corpus and its lake writes"),
        augment_estimate(recipe, found.augmenters, sentences, workers),
    ]
    pair = pair_estimate(recipe, found, scale)
    stages.append(pair)
    if recipe.train is not None and "cpu" in found.train:
        stages.append(train_estimate(recipe, found, pair.rows))
        if recipe.evaluate is not None:
            stages.append(evaluate_estimate(recipe, found))
    return stages


def pair_estimate(recipe: Recipe, found: Measures, scale: float) -> StageEstimate:
    """Pairing's SQL at an assumed rate; with mined negatives the sample's whole time scales with
    the corpus (embedding what the store lacks, and the search). Memory: the sample's peak plus
    what grows with the pairs (the pairs in Arrow; mining's embeddings and search, its bound)."""
    pairs = round(found.pairs * scale)
    grown = (pairs - found.pairs) * found.pair_bytes
    negatives = recipe.pair.negatives
    if isinstance(negatives, MinedNegatives):
        seconds, note = found.pair.seconds * max(scale, 1.0), "mining negatives: the sample's time x the corpus"
        if found.mining is None:
            note += "; mining's memory unmeasured (the sample mined nothing)"
        else:
            full = found.mining.scaled(max(scale, 1.0))
            grown += negatives.memory_bytes(full) - negatives.memory_bytes(found.mining)
            note += f"; {negatives.index_for(full.candidates)} search over {full.candidates:,} candidates"
            if negatives.store:  # the texts the filter or an earlier mining stored are not stored twice
                note += f"; embeddings kept in the lake: up to {full.texts * full.dims * 4 / 2**30:,.2f} GiB"
    else:
        seconds, note = (
            found.pair.seconds + pairs / PAIR_ROWS_PER_S,
            f"per-pair cost assumed at {PAIR_ROWS_PER_S:,} pairs/s",
        )
    return _alone("pair", pairs, seconds, found.pair.peak + max(round(grown), 0), note)


def _alone(stage: str, rows: int, seconds: float, peak: int, note: str, gpu: float | None = None) -> StageEstimate:
    """A stage that runs in the run's own process, whatever the Dask workers."""
    return StageEstimate(stage, rows, seconds, peak, seconds, peak, gpu, note)


def augment_estimate(recipe: Recipe, measures: list[AugmenterMeasure], sentences: int, workers: int) -> StageEstimate:
    """Only what is new costs: sentences without the augmenter's view, translations not cached.
    Shards spread over the workers, each of which loads its own engines."""
    shards = max(math.ceil(sentences / recipe.execution.shard_sentences), 1)
    spread = min(workers, shards)
    here = spread_out = 0.0
    for m in measures:
        todo = sentences * (1 - m.views_present)
        hits = m.cache_hits or 0.0
        # of the sentences still to do, the share whose translations are cached
        cached = 1.0 if m.views_present >= 1 else max(0.0, (hits - m.views_present) / (1 - m.views_present))
        per_sentence = m.view_s + (1 - cached) * m.engine_s
        work = todo * per_sentence + lake_commits_s(m, todo, 1 - cached, per_sentence, shards)
        load = m.load_s if todo else 0.0  # a shard with every view present starts no engine
        here += load + work
        spread_out += load + work / spread
    peak = max(m.peak_rss for m in measures)
    note = f"{shards} shard(s) of {recipe.execution.shard_sentences}; scales with Dask workers up to the shards"
    return StageEstimate("augment", sentences * len(measures), here, peak, spread_out, peak * spread, None, note)


def lake_commits_s(m: AugmenterMeasure, todo: float, new_share: float, per_sentence: float, shards: int) -> float:
    """The lake's seconds over the run's commits: views commits sized as the run sizes them (a
    shard at a time), each with its new translations unless the engine commits them per chunk."""
    translating = new_share > 0 and m.translation_commit_s > 0
    with_views = translating and m.translation_chunk is None
    commit_s = m.view_commit_s + (m.translation_commit_s if with_views else 0.0)
    commits = commits_for(math.ceil(todo), per_sentence, commit_s, m.fixed_commit, shards=shards)
    own = math.ceil(todo * new_share / m.translation_chunk) if translating and m.translation_chunk else 0
    return commits * commit_s + own * m.translation_commit_s


def train_estimate(recipe: Recipe, found: Measures, pairs: int) -> StageEstimate:
    """The sample's steps at the recipe's budget; memory: the sample's peak plus the whole
    snapshot, which training holds in Arrow."""
    spec = recipe.train
    assert spec is not None
    passes = spec.steps // spec.eval_every + 1 if spec.eval_every and spec.dev_tasks else 0

    def seconds(device: str) -> float:
        t, e = found.train[device], found.encode[device]
        return t.load_s + spec.steps * t.step_s + t.export_s + passes * found.dev_texts / e.texts_per_s

    cpu, on_gpu = found.train["cpu"], found.train.get("cuda")
    gpu = seconds("cuda") if on_gpu is not None else None
    note = (f"{spec.steps} steps of batch {spec.batch_size}; {passes} dev scoring pass(es); "
            "does not scale with Dask workers (one process; DDP under torchrun does)")  # fmt: skip
    if on_gpu is not None and on_gpu.peak_gpu is not None:
        note += f"; GPU memory peak {on_gpu.peak_gpu / 2**20:,.0f} MiB"
    snapshot = max(round((pairs - found.pairs) * found.pair_bytes), 0)
    return _alone("train", spec.steps * spec.batch_size, seconds("cpu"), cpu.peak_rss + snapshot, note, gpu)


def soup_estimate(recipe: Recipe, found: Measures) -> StageEstimate:
    """Loading every model, then one dev scoring per candidate mix; memory: each model's weights,
    the first one's copy and a mix's average, beside one model loaded for encoding."""
    assert recipe.soup is not None and recipe.train is not None
    models = 1 + len(recipe.soup.recipes)
    mixes = len(candidate_weights(recipe.soup.shares, models))
    weights = sum(f.stat().st_size for f in Path(resolve_encoder(recipe.train.encoder)).rglob("*.safetensors"))

    def seconds(device: str) -> float:
        e = found.encode[device]
        return models * e.load_s + mixes * found.dev_texts / e.texts_per_s

    gpu = seconds("cpu") if "cuda" in found.encode else None  # the soup scores its mixes on the CPU
    note = f"{models} models averaged; {mixes} candidate mixes x {found.dev_texts} dev texts, on the CPU"
    return _alone("soup", mixes, seconds("cpu"), found.encode["cpu"].peak_rss + (models + 2) * weights, note, gpu)


def evaluate_estimate(recipe: Recipe, found: Measures) -> StageEstimate:
    assert recipe.evaluate is not None
    models = 2 if recipe.evaluate.baseline else 1

    def seconds(device: str) -> float:
        e = found.encode[device]
        return models * (e.load_s + found.eval_texts / e.texts_per_s)

    gpu = seconds("cpu") if "cuda" in found.encode else None  # evaluation embeds on the CPU, a GPU box too
    note = f"{models} model(s) x {found.eval_texts} texts on the CPU; encoding only (stored results are reused)"
    return _alone("evaluate", models * found.eval_texts, seconds("cpu"), found.encode["cpu"].peak_rss, note, gpu)
