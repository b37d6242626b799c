"""Augmenters that turn a corpus's sentences into views, with quality signals and filters."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa
from viewmill.augment.augmenters import AugmenterSpec, ProduceContext, Producer, make_producer
from viewmill.augment.cache import CacheStats
from viewmill.augment.commit_sizes import MIN_SENTENCES, CommitSizes, fixed_sentences, on_gpu
from viewmill.augment.meaning import MeaningJudge
from viewmill.augment.quality import FilterSpec, quality_signals_batch, reject_reason
from viewmill.storage.embeddings import PendingEmbeddings
from viewmill.storage.ids import fingerprint
from viewmill.storage.lake import Lake
from viewmill.storage.schema import PROVENANCE, QUALITY, VIEWS


@dataclass(frozen=True)
class Shard:
    """Shard `index` of `count`: the sentences whose id's first 32 bits fall in the `index`-th
    of `count` equal ranges (`bounds`). Ids are content hashes, so shards are stable
    across runs and machines and about equal in size; and as a range, a shard's commits write
    files of a narrow id (and source-text hash) range, which later commits' duplicate checks
    and translation-cache lookups skip by their min/max (a modulo spread every file over the
    whole range, so each commit read every earlier one: quadratic at a million sentences)."""

    index: int = 0
    count: int = 1

    def __post_init__(self) -> None:
        if not 0 <= self.index < self.count:
            raise ValueError(f"shard index {self.index} is outside 0..{self.count - 1}")

    def bounds(self) -> tuple[str | None, str | None]:
        """The shard as a range of ids, [low, high) (None: open): the first 32 bits of a lake
        id (16 lowercase hex digits) in [ceil(index * 2^32 / count), ceil((index + 1) * 2^32 /
        count)). Compared as strings, so a scan prunes by its files' min/max and computes
        nothing per row; the open ends give any other string one shard too."""

        def edge(index: int) -> str:
            return f"{-(-index * 2**32 // self.count):08x}"

        return (edge(self.index) if self.index else None, edge(self.index + 1) if self.index < self.count - 1 else None)

    @classmethod
    def all_of(cls, sentences: int, per_shard: int) -> list[Shard]:
        count = max(1, -(-sentences // per_shard))
        return [cls(i, count) for i in range(count)]


@dataclass
class ShardReport:
    augmenter: str
    config_hash: str
    shard: int = 0
    sentences: int = 0
    reused_views: int = 0
    new_views: int = 0
    cache: CacheStats = field(default_factory=CacheStats)
    worker: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")


@dataclass
class AugmentReport:
    augmenter: str
    config_hash: str
    sentences: int = 0  # in the corpus; kept and rejected count all their views, old and new
    reused_views: int = 0
    new_views: int = 0
    kept: int = 0
    rejected: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    cache: CacheStats = field(default_factory=CacheStats)
    shards: int = 1
    workers: list[str] = field(default_factory=list)  # host:pid of the processes that ran its shards

    def as_dict(self) -> dict:
        return asdict(self)


def shard_sql(column: str, shard: Shard) -> tuple[str, list[str]]:
    """SQL (and its parameters) that keeps the rows of `shard` by their id `column`."""
    low, high = shard.bounds()
    clauses = [f"{column} >= ?"] * (low is not None) + [f"{column} < ?"] * (high is not None)
    return " AND ".join(clauses) or "true", [edge for edge in (low, high) if edge is not None]


def corpus_sentences(lake: Lake, corpus: str, shard: Shard = Shard()) -> list[tuple[str, str, str]]:
    """(sentence_id, text, lang) of the corpus's sentences in `shard`, in id order."""
    in_shard, params = shard_sql("sentence_id", shard)  # a shard reads only its own rows
    table = lake.arrow(
        f"SELECT sentence_id, text, lang FROM sentences WHERE corpus = ? AND {in_shard} ORDER BY sentence_id",
        [corpus, *params],
    )
    return list(
        zip(table["sentence_id"].to_pylist(), table["text"].to_pylist(), table["lang"].to_pylist(), strict=True)
    )


def config_hash(
    spec: AugmenterSpec,
    filters: FilterSpec,
    producer: Producer,
    judge: MeaningJudge | None = None,
    chunk_size: int | None = None,
) -> str:
    """What decides an augmenter's views: its spec, the filters and its engines' identities
    (models and versions), with `filters.meaning` the judge's (the encoder's weights, the
    earlier augmenters' configurations), and where the views depend on their batch, the chunk
    they are made in (`chunk_size`: the recipe's `execution.chunk_sentences`, if set). Views,
    shard tasks and pairs are keyed by it."""
    if (filters.meaning is None) != (judge is None):
        raise ValueError(
            f"augmenter {spec.name}: filters.meaning and the meaning judge go together (the augment stage "
            "builds the judge from filters.meaning.encoder): set both or neither"
        )
    meaning = [judge.identity] if judge is not None else []  # absent: hashes from before the filter stay
    chunk = _chunk(spec, filters, chunk_size)
    return fingerprint(spec.model_dump(), filters.model_dump(), producer.identity, *meaning, *chunk)


def _chunk(spec: AugmenterSpec, filters: FilterSpec, chunk_size: int | None) -> list[list[Any]]:
    """The configuration hash's entry for the chunk batch-dependent views are made in: none for
    512 (the only chunk before any other existed) or views that do not depend on it; on a GPU
    as `gpu_chunk`, as its chunk was first hashed."""
    if not views_depend_on_batch(spec, filters):
        return []
    fixed = fixed_commit_size(spec, filters, chunk_size)
    if fixed == MIN_SENTENCES:
        return []
    return [["gpu_chunk" if on_gpu(*model_devices(spec, filters)) else "chunk", fixed]]


def views_present(lake: Lake, sentence_ids: list[str], config_hash: str) -> set[str]:
    """Which of these sentences already have a view of this configuration."""
    wanted = pa.table({"sentence_id": pa.array(sentence_ids, pa.string())})
    with lake.with_keys("_wanted", wanted):
        found = lake.arrow(
            "SELECT DISTINCT v.sentence_id FROM views v JOIN _wanted USING (sentence_id) WHERE v.config_hash = ?",
            [config_hash],
        )
    return set(found["sentence_id"].to_pylist())


def make_shard_views(
    lake: Lake,
    corpus: str,
    spec: AugmenterSpec,
    filters: FilterSpec,
    *,
    run_id: str,
    shard: Shard = Shard(),
    chunk_size: int | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    judge: MeaningJudge | None = None,
    producer: Producer | None = None,
) -> ShardReport:
    """Make one view per sentence of the shard that lacks one from this augmenter; store it
    with its quality signals and filter verdict (`judge`: the meaning filter's encoder, needed
    exactly when `filters.meaning` is set). `producer`: the spec's producer, built once by the
    caller, who closes it; without one, it is built and closed here.

    Work is committed chunk by chunk (translations, then the chunk's views), so a killed
    run resumes where it stopped and never writes a view twice: `chunk_size` sentences a
    chunk, or without it about a second of work (more as the lake's share of a commit grows)
    where the views do not depend on how they are batched, else a fixed size (`fixed_commit_size`).
    `on_progress(done, total)` is called after each chunk.
    """
    owned = producer is None
    producer = make_producer(spec, lake) if producer is None else producer
    try:
        config = config_hash(spec, filters, producer, judge, chunk_size)
        sentences = corpus_sentences(lake, corpus, shard)
        present = views_present(lake, [sid for sid, _, _ in sentences], config)
        todo = [row for row in sentences if row[0] not in present]
        report = ShardReport(spec.name, config, shard=shard.index, sentences=len(sentences), reused_views=len(present))
        ctx = ProduceContext(lake, run_id, report.cache)
        if on_progress is not None:
            on_progress(0, len(todo))
        reached_key = (config, str(lake.root), lake.data_path)
        done, sizes = 0, _commit_sizes(spec, filters, chunk_size, lake, _reached.get(reached_key, MIN_SENTENCES))
        # The filter's embeddings for the lake's store, written a few times a shard: each write's
        # duplicate check reads every key stored under the encoder (a kill loses what is pending).
        store = judge.pending() if judge is not None else None
        with nullcontext() if store is None else store.written_at_end(lake) as pending:
            for chunk in sizes.chunks(todo):
                views = _chunk_views(chunk, producer, ctx, spec, filters, config, run_id)
                views = _judged(views, chunk, lake, filters, judge, pending)
                with lake.transaction():
                    report.new_views += lake.append("views", views, unique_on=("view_id",))
                if pending is not None and pending.full:
                    pending.write(lake)
                done += len(chunk)
                if on_progress is not None:
                    on_progress(done, len(todo))
        _reached[reached_key] = sizes.size
    finally:
        if owned:
            producer.close()
    return report


def _judged(
    views: pa.Table,
    chunk: list[tuple[str, str, str]],
    lake: Lake,
    filters: FilterSpec,
    judge: MeaningJudge | None,
    pending: PendingEmbeddings | None,
) -> pa.Table:
    """`views` with the meaning filter's cosines and verdicts, where the recipe has the filter."""
    if judge is None or filters.meaning is None:
        return views
    rows = views.to_pylist()
    judge.apply(lake, filters.meaning, rows, [source for _, source, _ in chunk], pending)
    return pa.Table.from_pylist(rows, schema=VIEWS)


# Per configuration and lake, the commit size this process's last shard reached: its next shard
# starts there, not at MIN_SENTENCES again (a 5,000-sentence shard made 4 commits where 1 does).
_reached: dict[tuple[str, str, str], int] = {}


def _commit_sizes(
    spec: AugmenterSpec, filters: FilterSpec, chunk_size: int | None, lake: Lake, start: int = MIN_SENTENCES
) -> CommitSizes:
    fixed = fixed_commit_size(spec, filters, chunk_size)
    return CommitSizes(fixed, lake_seconds=lake.busy_seconds, start=start)


def views_depend_on_batch(spec: AugmenterSpec, filters: FilterSpec) -> bool:
    """Whether a chunk's make-up can change a view or its verdict: a neural engine batches and
    pads per chunk, the meaning filter embeds per chunk."""
    return filters.meaning is not None or not spec.views_batch_invariant()


def fixed_commit_size(spec: AugmenterSpec, filters: FilterSpec, chunk_size: int | None) -> int | None:
    """The recipe's fixed size; unset, None (sized by time) only where a chunk's make-up cannot
    change a view or its verdict (`views_depend_on_batch`), so a rerun of the same recipe makes
    the same views. On a GPU the chunk
    holds several of its larger batches, with the filter several of its encoder's calls
    (`fixed_sentences`)."""
    if chunk_size is None and views_depend_on_batch(spec, filters):
        return fixed_sentences(*model_devices(spec, filters), meaning=filters.meaning is not None)
    return chunk_size


def model_devices(spec: AugmenterSpec, filters: FilterSpec) -> tuple[str | None, str | None]:
    """The devices an augmenter's shard holds models on: its engine's (None: it has none) and
    the meaning filter's (None: no filter)."""
    return getattr(spec, "device", None), filters.meaning.device if filters.meaning is not None else None


def _chunk_views(
    chunk: list[tuple[str, str, str]],
    producer: Producer,
    ctx: ProduceContext,
    spec: AugmenterSpec,
    filters: FilterSpec,
    config: str,
    run_id: str,
) -> pa.Table:
    """The views of `chunk` (sentence id, text, language each) as `views` rows, with their
    quality signals and the filters' verdicts; built column by column (no row dicts)."""
    produced = producer.produce([(sid, text) for sid, text, _ in chunk], ctx)
    qualities = quality_signals_batch([source for _, source, _ in chunk], [view.text for view in produced])
    reasons = [
        view.reason or reject_reason(view.text, quality, filters, exempt=spec.exempt_from_filters)
        for view, quality in zip(produced, qualities, strict=True)
    ]
    n = len(chunk)
    columns = {
        "view_id": [fingerprint(sid, config) for sid, _, _ in chunk],
        "sentence_id": [sid for sid, _, _ in chunk],
        "augmenter": [spec.name] * n,
        "config_hash": [config] * n,
        "method": [spec.method] * n,
        "path": [spec.path_label] * n,
        "text": [view.text for view in produced],
        "lang": [producer.lang or source_lang for _, _, source_lang in chunk],
        "provenance": _struct_column([view.provenance for view in produced], PROVENANCE),
        "quality": _struct_column(qualities, QUALITY),
        "status": ["rejected" if reason else "kept" for reason in reasons],
        "reject_reason": reasons,
        "run_id": [run_id] * n,
    }
    return pa.table(columns, schema=VIEWS)


def _struct_column(objects: list, struct: pa.StructType) -> pa.StructArray:
    """A struct column from objects with an attribute per field."""
    fields = [struct.field(i) for i in range(struct.num_fields)]
    arrays = [pa.array([getattr(item, f.name) for item in objects], f.type) for f in fields]
    return pa.StructArray.from_arrays(arrays, fields=fields)


def summarise(lake: Lake, corpus: str, shards: list[ShardReport]) -> AugmentReport:
    """One augmenter's report over all its shards, with kept/rejected counts from the lake."""
    first = shards[0]
    report = AugmentReport(
        first.augmenter, first.config_hash, shards=len(shards), workers=sorted({part.worker for part in shards})
    )
    for part in shards:
        if part.config_hash != first.config_hash:
            raise RuntimeError(
                f"shards of augmenter {first.augmenter} ran with different configurations "
                f"({first.config_hash[:12]} and {part.config_hash[:12]}): run them from one recipe and code version"
            )
        report.sentences += part.sentences
        report.reused_views += part.reused_views
        report.new_views += part.new_views
        report.cache.add(part.cache)
    totals = lake.arrow(
        """
        SELECT coalesce(split_part(v.reject_reason, ':', 1), 'kept') AS reason, count(*) AS n
        FROM views v JOIN sentences s ON s.sentence_id = v.sentence_id AND s.corpus = ?
        WHERE v.config_hash = ? GROUP BY ALL
        """,
        [corpus, first.config_hash],
    ).to_pylist()
    reasons = {row["reason"]: row["n"] for row in totals}
    report.kept = reasons.pop("kept", 0)
    report.rejected = sum(reasons.values())
    report.reasons = reasons
    return report
