"""Augmenters that turn a corpus's sentences into views, with quality signals and filters."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import pyarrow as pa

from augment.augmenters import AugmenterSpec, make_producer
from augment.cache import CacheStats
from augment.quality import FilterSpec, quality_signals, reject_reason
from storage.ids import fingerprint
from storage.lake import Lake
from storage.schema import VIEWS


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

    def as_dict(self) -> dict:
        return asdict(self)


def pending_sentences(lake: Lake, corpus: str, config_hash: str) -> list[tuple[str, str, str]]:
    """(sentence_id, text, lang) of the corpus's sentences without a view of this configuration yet."""
    table = lake.arrow(
        """
        SELECT s.sentence_id, s.text, s.lang FROM sentences s
        WHERE s.corpus = ? AND NOT EXISTS (
            SELECT 1 FROM views v WHERE v.sentence_id = s.sentence_id AND v.config_hash = ?)
        ORDER BY s.sentence_id
        """,
        [corpus, config_hash],
    )
    return list(
        zip(table["sentence_id"].to_pylist(), table["text"].to_pylist(), table["lang"].to_pylist(), strict=True)
    )


def make_views(
    lake: Lake,
    corpus: str,
    spec: AugmenterSpec,
    filters: FilterSpec,
    *,
    run_id: str,
    chunk_size: int = 512,
    on_progress: Callable[[int, int], None] | None = None,
) -> AugmentReport:
    """Make one view per sentence of `corpus` that lacks one from this augmenter; store it
    with its quality signals and filter verdict.

    Work is committed chunk by chunk (translations, then the chunk's views), so a killed
    run resumes where it stopped and never writes a view twice.
    `on_progress(done, total)` is called after each chunk.
    """
    producer = make_producer(spec, lake)
    try:
        config_hash = fingerprint(spec.model_dump(), filters.model_dump(), producer.identity)
        todo = pending_sentences(lake, corpus, config_hash)
        total = lake.scalar("SELECT count(*) FROM sentences WHERE corpus = ?", [corpus])
        report = AugmentReport(spec.name, config_hash, sentences=total, reused_views=total - len(todo))
        if on_progress is not None:
            on_progress(0, len(todo))
        for start in range(0, len(todo), chunk_size):
            chunk = todo[start : start + chunk_size]
            produced = producer.produce(lake, [(sid, text) for sid, text, _ in chunk], run_id, report.cache)
            rows = []
            for (sid, source, source_lang), view in zip(chunk, produced, strict=True):
                quality = quality_signals(source, view.text)
                reason = view.reason or reject_reason(view.text, quality, filters, method=spec.method)
                rows.append(
                    {
                        "view_id": fingerprint(sid, config_hash),
                        "sentence_id": sid,
                        "augmenter": spec.name,
                        "config_hash": config_hash,
                        "method": spec.method,
                        "path": spec.path_label,
                        "text": view.text,
                        "lang": producer.lang or source_lang,
                        "provenance": view.provenance,
                        "quality": asdict(quality),
                        "status": "rejected" if reason else "kept",
                        "reject_reason": reason,
                        "run_id": run_id,
                    }
                )
            with lake.transaction():
                report.new_views += lake.append(
                    "views", pa.Table.from_pylist(rows, schema=VIEWS), unique_on=("view_id",)
                )
            if on_progress is not None:
                on_progress(min(start + chunk_size, len(todo)), len(todo))
    finally:
        producer.close()
    totals = lake.arrow(
        """
        SELECT coalesce(v.reject_reason, 'kept') AS reason, count(*) AS n
        FROM views v JOIN sentences s ON s.sentence_id = v.sentence_id AND s.corpus = ?
        WHERE v.config_hash = ? GROUP BY ALL
        """,
        [corpus, config_hash],
    ).to_pylist()
    reasons = {row["reason"]: row["n"] for row in totals}
    report.kept = reasons.pop("kept", 0)
    report.rejected = sum(reasons.values())
    report.reasons = reasons
    return report
