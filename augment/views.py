"""Augmenters that turn a corpus's sentences into views, with quality signals and filters."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Literal

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, field_validator

from augment.cache import CacheStats, translate_cached
from augment.engines import DecodingSpec, make_engine
from augment.quality import FilterSpec, quality_signals, reject_reason
from storage.ids import fingerprint
from storage.lake import Lake
from storage.schema import VIEWS


class BackTranslation(BaseModel):
    """A round trip through one or more pivots, e.g. path [en, es, en]."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    method: Literal["backtranslation"] = "backtranslation"
    engine: Literal["apertium"] = "apertium"
    path: list[str] = Field(min_length=3)
    decoding: DecodingSpec = DecodingSpec()

    @field_validator("path")
    @classmethod
    def _round_trip(cls, path: list[str]) -> list[str]:
        if path[0] != path[-1]:
            raise ValueError(f"a round trip must end in its source language: {'>'.join(path)}")
        return path

    @property
    def path_label(self) -> str:
        return ">".join(self.path)


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


def pending_sentences(lake: Lake, corpus: str, config_hash: str) -> list[tuple[str, str]]:
    """(sentence_id, text) of the corpus's sentences that have no view of this configuration yet."""
    table = lake.arrow(
        """
        SELECT s.sentence_id, s.text FROM sentences s
        WHERE s.corpus = ? AND NOT EXISTS (
            SELECT 1 FROM views v WHERE v.sentence_id = s.sentence_id AND v.config_hash = ?)
        ORDER BY s.sentence_id
        """,
        [corpus, config_hash],
    )
    return list(zip(table["sentence_id"].to_pylist(), table["text"].to_pylist(), strict=True))


def back_translate(
    lake: Lake,
    corpus: str,
    spec: BackTranslation,
    filters: FilterSpec,
    *,
    run_id: str,
    chunk_size: int = 512,
    on_progress: Callable[[int, int], None] | None = None,
) -> AugmentReport:
    """Make one round-trip view per sentence of `corpus` that lacks one; store views and cache.

    Work is committed chunk by chunk (translations, then the chunk's views), so a killed
    run resumes where it stopped and never writes a view twice.
    `on_progress(done, total)` is called after each chunk.
    """
    engines = [make_engine(spec.engine, src, tgt) for src, tgt in itertools.pairwise(spec.path)]
    config_hash = fingerprint(spec.model_dump(), filters.model_dump(), [(e.name, e.model, e.revision) for e in engines])
    with contextlib.ExitStack() as stack:
        for engine in engines:
            stack.callback(engine.close)
        legs = list(itertools.pairwise(spec.path))
        todo = pending_sentences(lake, corpus, config_hash)
        total = lake.scalar("SELECT count(*) FROM sentences WHERE corpus = ?", [corpus])
        report = AugmentReport(spec.name, config_hash, sentences=total, reused_views=total - len(todo))
        if on_progress is not None:
            on_progress(0, len(todo))
        for start in range(0, len(todo), chunk_size):
            chunk = todo[start : start + chunk_size]
            texts = [text for _, text in chunk]
            steps: list[list[tuple[str, str]]] = []  # per leg: (hypothesis, cache key) per sentence
            for engine, (src, tgt) in zip(engines, legs, strict=True):
                translated, stats = translate_cached(lake, engine, texts, src, tgt, spec.decoding, run_id=run_id)
                report.cache.add(stats)
                steps.append([translated[t] for t in texts])
                texts = [hyp for hyp, _ in steps[-1]]
            rows = []
            for i, (sid, source) in enumerate(chunk):
                view = texts[i]
                quality = quality_signals(source, view)
                reason = reject_reason(view, quality, filters)
                rows.append(
                    {
                        "view_id": fingerprint(sid, config_hash),
                        "sentence_id": sid,
                        "augmenter": spec.name,
                        "config_hash": config_hash,
                        "method": spec.method,
                        "path": spec.path_label,
                        "text": view,
                        "lang": spec.path[-1],
                        "provenance": {
                            "engines": [e.name for e in engines],
                            "models": [f"{e.model}@{e.revision}" for e in engines],
                            "decoding": spec.decoding.canonical(),
                            "cache_keys": [step[i][1] for step in steps],
                        },
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
