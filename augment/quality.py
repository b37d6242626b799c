"""Quality signals for a view against its source, and the recipe's filters over them."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import fastchrf
from pydantic import Field, SerializerFunctionWrapHandler, model_serializer
from viewmill.augment.meaning import MeaningSpec

from viewmill.specs import Spec


@dataclass(frozen=True)
class Quality:
    length_ratio: float
    chrf_to_source: float
    identical_to_source: bool
    repeated_ngram: int
    cosine_to_source: float | None = None


def _max_ngram_repeats(text: str, n: int = 3) -> int:
    words = text.lower().split()
    grams = Counter(tuple(words[i : i + n]) for i in range(len(words) - n + 1))
    return max(grams.values(), default=0)


def quality_signals(source: str, view: str) -> Quality:
    """Signals comparing a view with its source sentence (see `quality_signals_batch`)."""
    return quality_signals_batch([source], [view])[0]


def quality_signals_batch(sources: list[str], views: list[str]) -> list[Quality]:
    """Signals comparing each view with its source sentence.

    `chrf_to_source` is sacrebleu's sentence-level chrF (its defaults), computed for the
    whole batch at once by fastchrf (Rust): sacrebleu's, one Python call a view, was about
    half of augment's own time (issue 32). `repeated_ngram` counts how many more times the
    view's most repeated word trigram occurs than the source's: decoders that loop produce
    large values.
    """
    scores = iter(chrf_scores([(s, v) for s, v in zip(sources, views, strict=True) if not _copy(s, v)]))
    return [
        Quality(length_ratio=1.0, chrf_to_source=100.0, identical_to_source=True, repeated_ngram=0)
        if _copy(source, view)
        else Quality(
            length_ratio=len(view) / max(1, len(source)),
            chrf_to_source=next(scores),
            identical_to_source=view.strip().casefold() == source.strip().casefold(),
            repeated_ngram=max(0, _max_ngram_repeats(view) - _max_ngram_repeats(source)),
        )
        for source, view in zip(sources, views, strict=True)
    ]


def _copy(source: str, view: str) -> bool:
    # chrF of a text with itself is exactly 100, unless it is whitespace alone (chrF drops whitespace: 0).
    return view == source and bool(source.strip())


def chrf_scores(pairs: list[tuple[str, str]]) -> list[float]:
    """sacrebleu's `CHRF().sentence_score(view, [source]).score` for each (source, view),
    identical to the last bit. Whitespace is dropped here, as sacrebleu drops it (`str.split`),
    so the two cannot disagree on which characters are whitespace."""
    if not pairs:
        return []
    hypotheses = [["".join(view.split())] for _, view in pairs]
    references = [["".join(source.split())] for source, _ in pairs]
    return [row[0][0] for row in fastchrf.pairwise_chrf(hypotheses, references, remove_whitespace=False)]


class FilterSpec(Spec):
    """Which views are kept. A rejected view is still stored, with its reason."""

    min_length_ratio: float = Field(0.5, ge=0, le=1000)
    max_length_ratio: float = Field(2.0, gt=0, le=1000)
    min_chrf: float = Field(0.0, ge=0, le=100)
    max_chrf: float = Field(100.0, ge=0, le=100)
    reject_identical: bool = False
    max_repeated_ngram: int = Field(1, ge=0, le=1000)
    meaning: MeaningSpec | None = Field(None, description="cosine to the source under an encoder; near-duplicates")

    @model_serializer(mode="wrap")
    def _without_unset_meaning(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Configuration hashes and recipe hashes from before `meaning` existed stay valid.
        data = handler(self)
        if self.meaning is None:
            data.pop("meaning", None)
        return data


def reject_reason(view: str, quality: Quality, spec: FilterSpec, exempt: bool = False) -> str | None:
    """The first filter a view fails, as a short machine-readable reason; None if kept.

    Views of an `exempt` augmenter (its class's `exempt_from_filters`: identity, entailment)
    only get the emptiness check. The meaning filter (`spec.meaning`) needs an encoder and
    runs after these (`MeaningJudge`).
    """
    if not view.strip():
        return "empty"
    if exempt:
        return None
    if spec.reject_identical and quality.identical_to_source:
        return "identical_to_source"
    if quality.length_ratio < spec.min_length_ratio:
        return f"length_ratio<{spec.min_length_ratio:g}"
    if quality.length_ratio > spec.max_length_ratio:
        return f"length_ratio>{spec.max_length_ratio:g}"
    if quality.chrf_to_source < spec.min_chrf:
        return f"chrf<{spec.min_chrf:g}"
    if quality.chrf_to_source > spec.max_chrf:
        return f"chrf>{spec.max_chrf:g}"
    if quality.repeated_ngram > spec.max_repeated_ngram:
        return f"repeated_ngram>{spec.max_repeated_ngram}"
    return None
