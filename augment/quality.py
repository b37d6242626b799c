"""Quality signals for a view against its source, and the recipe's filters over them."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer
from sacrebleu.metrics import CHRF
from viewmill.augment.meaning import MeaningSpec

from viewmill.specs import Spec

_CHRF = CHRF()


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
    """Signals comparing a view with its source sentence.

    `repeated_ngram` counts how many more times the view's most repeated word trigram
    occurs than the source's: decoders that loop produce large values.
    """
    if view == source and source.strip():
        # sacrebleu's chrF, per sentence and slow, of a text with itself is exactly 100 (it drops
        # whitespace: a text of whitespace alone scores 0, so that one is computed).
        return Quality(length_ratio=1.0, chrf_to_source=100.0, identical_to_source=True, repeated_ngram=0)
    return Quality(
        length_ratio=len(view) / max(1, len(source)),
        chrf_to_source=_CHRF.sentence_score(view, [source]).score,
        identical_to_source=view.strip().casefold() == source.strip().casefold(),
        repeated_ngram=max(0, _max_ngram_repeats(view) - _max_ngram_repeats(source)),
    )


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
