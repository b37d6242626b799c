"""The augment stage: a plan (configuration hashes and shards), one job per augmenter and
shard (run here, on a Prefect task runner or a Dask cluster), and each augmenter's totals.

With `filters.meaning`, the stage builds the filter's encoder (loaded once per process, at
its first batch) and injects it into the views code as a `MeaningJudge`; an augmenter's
near-duplicate check reads the views of the recipe's augmenters listed before it, so its
shard job makes theirs first when they are missing (normally their own jobs ran before)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

import numpy as np
import pyarrow as pa
from viewmill.augment.augmenters import AugmenterSpec
from viewmill.augment.embedding_cache import EmbeddingCache
from viewmill.augment.meaning import MeaningJudge, MeaningSpec
from viewmill.augment.models import load_once
from viewmill.augment.quality import FilterSpec
from viewmill.augment.views import (
    AugmentReport,
    Shard,
    ShardReport,
    config_hash,
    make_shard_views,
    summarise,
)
from viewmill.pipelines.context import RunContext
from viewmill.pipelines.progress import progress_bar
from viewmill.pipelines.recipe import Recipe
from viewmill.pipelines.stages.producers import lent_producer
from viewmill.pipelines.stages.shard_lakes import keeping_lakes, shard_lake
from viewmill.storage.embeddings import encoder_key
from viewmill.storage.ids import fingerprint
from viewmill.storage.lake import open_lake
from viewmill.storage.maintenance import tidy_after_run
from viewmill.storage.negatives import NegativesSpec
from viewmill.train.encoder import (
    EncoderError,
    encode_in,
    encoder_fingerprint,
    load_sentence_model,
    resolve_encoder,
)
from viewmill.train.mining import MinedNegatives

from viewmill.cpu import auto_precision
from viewmill.settings import Settings

EMBED_BATCH = 128  # texts per forward pass of the meaning encoder


@dataclass(frozen=True)
class AugmentPlan:
    """What augmentation will do; shard tasks are keyed by these."""

    configs: dict[str, str]  # augmenter -> configuration hash (spec, filters, engines', meaning judge's identities)
    shards: list[Shard]
    corpus_state: str  # a fingerprint of the corpus's sentence ids
    lake_epoch: str  # when the lake was created: a new lake never reuses cached shards
    meaning_precision: str | None = None  # the meaning encoder's, resolved where the run was planned
    meaning_store: bool = False  # the filter stores what it embeds in the lake (the recipe mines with its encoder)


@dataclass(frozen=True)
class ShardJob:
    """The arguments of one augment_shard call: plain values, so it runs on any worker."""

    lake_root: str
    corpus: str
    spec: AugmenterSpec
    filters: FilterSpec
    shard: Shard
    config_hash: str
    corpus_state: str
    lake_epoch: str
    run_id: str
    chunk_sentences: int | None
    settings: Settings
    earlier: tuple[AugmenterSpec, ...] = ()  # with filters.meaning: the recipe's augmenters listed before spec
    meaning_precision: str | None = None  # the plan's: a worker on another CPU embeds as planned
    meaning_store: bool = False

    def kwargs(self) -> dict[str, Any]:
        """Keyword arguments for augment_shard (its Prefect task's cache key hashes them)."""
        args = {field.name: getattr(self, field.name) for field in fields(self)}
        return {**args, "shard": asdict(self.shard)}


def meaning_judge(spec: MeaningSpec | None, precision: str | None = None, store: bool = False) -> MeaningJudge | None:
    """The meaning filter's judge for the recipe's first augmenter (`earlier` grows after it):
    the encoder's weights are fingerprinted now and loaded at the first batch, once per process,
    with the process's cache of its embeddings (each distinct text embedded once: `EmbeddingCache`).

    `precision` is the encoder's: None resolves `auto` as training does (bf16 autocast on a CPU
    with native bf16, 2.8x the texts a second there; fp32 elsewhere). Cosines in bf16 differ in
    their last digits, so a bf16 judge's identity (and with it the views' configuration) differs;
    an fp32 judge's is what it always was. Shard workers are handed the plan's precision.
    `store`: store what it embeds in the lake's embedding store, for a miner of the same encoder
    (`shares_embeddings`); the views are the same either way, so it is not in the identity."""
    if spec is None:
        return None
    try:
        path = resolve_encoder(spec.encoder)
    except EncoderError as exc:
        raise EncoderError(f"filters.meaning.encoder: {exc}") from None
    device = spec.device
    precision = precision or auto_precision(device)
    if precision not in ("fp32", "bf16"):
        raise ValueError(f"the meaning encoder's precision is {precision!r}: fp32 or bf16")

    def load() -> EmbeddingCache:
        model = load_sentence_model(path, device=device)

        def encode(texts: list[str]) -> np.ndarray:
            return encode_in(model, texts, precision, device=device, batch_size=EMBED_BATCH).numpy()

        return EmbeddingCache(encode)

    def embed(texts: list[str]) -> np.ndarray:  # every augmenter and shard of the process shares the cache
        return load_once("sentence-encoder", path, device, f"meaning-{precision}", load)(texts)

    fingerprint = encoder_fingerprint(path)
    identity = fingerprint if precision == "fp32" else f"{fingerprint}+{precision}"
    return MeaningJudge(identity, embed, precision=precision, embedding_key=encoder_key(fingerprint, precision),
                        store=store)  # fmt: skip


def recipe_judge(recipe: Recipe) -> MeaningJudge | None:
    """The recipe's meaning filter, storing its embeddings where the recipe's miner shares them."""
    judge = meaning_judge(recipe.filters.meaning)
    return replace(judge, store=True) if shares_embeddings(judge, recipe.pair.negatives) else judge


def shares_embeddings(judge: MeaningJudge | None, negatives: NegativesSpec | None) -> bool:
    """Whether the recipe mines negatives with the meaning filter's encoder and precision, keeping
    embeddings in the lake: then the filter stores what it embeds and mining reads it."""
    return (
        judge is not None and isinstance(negatives, MinedNegatives) and negatives.store
        and negatives.embedding_key() == judge.embedding_key
    )  # fmt: skip


def _after(judge: MeaningJudge | None, earlier: list[str]) -> MeaningJudge | None:
    return None if judge is None else replace(judge, earlier=tuple(earlier))


def augment_plan(ctx: RunContext) -> AugmentPlan:
    """Each augmenter's configuration hash (in the recipe's order: with the meaning filter, each
    depends on the ones before it) and the shards of the corpus."""
    recipe = ctx.recipe
    judge = recipe_judge(recipe)
    with ctx.lake(read_only=True) as lake:
        configs: dict[str, str] = {}
        for spec in recipe.augmenters:  # producers kept for the shards this process runs
            with lent_producer(spec, lake, ctx.run_id) as producer:
                judged = _after(judge, list(configs.values()))
                chunk = recipe.execution.chunk_sentences
                configs[spec.name] = config_hash(spec, recipe.filters, producer, judged, chunk)
        ids = lake.arrow(
            "SELECT sentence_id FROM sentences WHERE corpus = ? ORDER BY sentence_id", [recipe.corpus_name]
        )["sentence_id"].to_pylist()
        epoch = lake.created_at()
    shards = Shard.all_of(len(ids), recipe.execution.shard_sentences)
    precision = judge.precision if judge is not None else None
    store = judge is not None and judge.store
    return AugmentPlan(configs, shards, fingerprint(ids), epoch, meaning_precision=precision, meaning_store=store)


def augment_shard(
    lake_root: str,
    corpus: str,
    spec: AugmenterSpec,
    filters: FilterSpec,
    shard: dict[str, int],
    config_hash: str,
    corpus_state: str,
    lake_epoch: str,
    run_id: str,
    chunk_sentences: int | None = None,
    settings: Settings | None = None,
    earlier: tuple[AugmenterSpec, ...] = (),
    meaning_precision: str | None = None,
    meaning_store: bool = False,
) -> ShardReport:
    """One shard of one augmenter: runs wherever its task is scheduled (another process or
    machine), so it takes plain values and opens the lake itself. `config_hash`,
    `corpus_state` and `lake_epoch` say what the result depends on: task caches key on them.
    The meaning filter's near-duplicate check reads the `earlier` augmenters' views of the
    shard: the flow runs their shard first (`submit_shards` waits for it), so here they are
    only looked up, and made only where missing (a shard run on its own); only this
    augmenter's work is reported."""
    part = Shard(**shard)
    judge = meaning_judge(filters.meaning, meaning_precision, meaning_store)
    configs: list[str] = []
    with shard_lake(settings or Settings(), lake_root) as lake:
        for current in (*earlier, spec):
            engine = getattr(current, "engine", None) or current.method  # the rate is the engine's
            label = f"augment {current.name} ({engine}) shard {part.index + 1}/{part.count}"
            with progress_bar(label, unit="sentences") as advance, lent_producer(current, lake, run_id) as producer:
                report = make_shard_views(
                    lake, corpus, current, filters, run_id=run_id, shard=part, chunk_size=chunk_sentences,
                    on_progress=advance, judge=_after(judge, configs), producer=producer,
                )  # fmt: skip
            configs.append(report.config_hash)
    if report.config_hash != config_hash:
        raise RuntimeError(
            f"augmenter {spec.name} has configuration {report.config_hash[:12]} on this worker but "
            f"{config_hash[:12]} where the run was planned: install the same viewmill, models and data everywhere"
        )
    return report


def shard_jobs(ctx: RunContext, plan: AugmentPlan) -> list[ShardJob]:
    """Every augment_shard call the plan asks for: augmenter by augmenter, or with the meaning
    filter shard by shard, so that run one at a time a shard's augmenters follow each other and
    its sources' and views' embeddings are still in the process's bounded cache when the next needs them."""
    recipe = ctx.recipe
    ordered = recipe.filters.meaning is not None  # near-duplicates are judged against earlier augmenters
    augmenters = list(enumerate(recipe.augmenters))
    order = (
        [(position, spec, shard) for shard in plan.shards for position, spec in augmenters]
        if ordered
        else [(position, spec, shard) for position, spec in augmenters for shard in plan.shards]
    )
    return [
        ShardJob(
            lake_root=str(ctx.state.lake),
            corpus=recipe.corpus_name,
            spec=spec,
            filters=recipe.filters,
            shard=shard,
            config_hash=plan.configs[spec.name],
            corpus_state=plan.corpus_state,
            lake_epoch=plan.lake_epoch,
            run_id=ctx.run_id,
            chunk_sentences=recipe.execution.chunk_sentences,
            settings=ctx.settings,
            earlier=tuple(recipe.augmenters[:position]) if ordered else (),
            meaning_precision=plan.meaning_precision,
            meaning_store=plan.meaning_store,
        )
        for position, spec, shard in order
    ]


# A shard job as shards_missing_views joins it: its id range [low, high), high null for the last.
SHARD_JOBS = pa.schema([("job", pa.int64()), ("corpus", pa.string()), ("config_hash", pa.string()),
                        ("low", pa.string()), ("high", pa.string())])  # fmt: skip


def shards_missing_views(lake_root: str, jobs: list[ShardJob], settings: Settings | None = None) -> list[bool]:
    """For each shard job, whether the lake lacks a view of its configuration for any of the
    shard's sentences. A cached shard result is only as good as the views it wrote: after
    rows were deleted or an older catalog was restored, the shard must run again."""
    if not jobs:
        return []
    ranges = [job.shard.bounds() for job in jobs]
    keys = pa.Table.from_pylist(
        [{"job": i, "corpus": job.corpus, "config_hash": job.config_hash, "low": low or "", "high": high}
         for i, (job, (low, high)) in enumerate(zip(jobs, ranges, strict=True))],
        schema=SHARD_JOBS,
    )  # fmt: skip
    with open_lake(settings or Settings(), lake_root, read_only=True) as lake, lake.with_keys("_jobs", keys):
        rows = lake.con.execute(
            """
            SELECT j.job, count(*) FILTER (WHERE v.view_id IS NULL) AS missing
            FROM _jobs j
            JOIN sentences s ON s.corpus = j.corpus
                 AND s.sentence_id >= j.low AND coalesce(s.sentence_id < j.high, true)
            LEFT JOIN (SELECT DISTINCT sentence_id, config_hash, view_id FROM views) v
                 ON v.sentence_id = s.sentence_id AND v.config_hash = j.config_hash
            GROUP BY j.job
            """
        ).fetchall()
    missing = {int(job): int(n) for job, n in rows}
    return [missing.get(i, 0) > 0 for i in range(len(jobs))]


def run_shards_here(jobs: list[ShardJob]) -> list[ShardReport]:
    with keeping_lakes():
        return [augment_shard(**job.kwargs()) for job in jobs]


def augment_finish(ctx: RunContext, augmenter: str, shard_reports: list[ShardReport]) -> AugmentReport:
    """An augmenter's totals over its shards; when they wrote anything, the lake's small files are
    merged and the superseded ones deleted, so raw Parquet reads count each row once."""
    wrote = any(r.new_views for r in shard_reports)
    with ctx.lake(read_only=not wrote) as lake:
        if wrote:  # chunked commits leave many small files; merged, the superseded ones are deleted
            tidy_after_run(lake)
        return summarise(lake, ctx.recipe.corpus_name, shard_reports)
