"""Replacement augmenters: about `ratio` of a sentence's words replaced, by WordNet synonyms
(`synonym`) or a masked language model (`mlm`), seeded per sentence."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field
from viewmill.augment.augmenter_base import (
    AugmenterConfig,
    ProduceContext,
    ProducedView,
    Producer,
    Provenance,
    sentence_seed,
)
from viewmill.augment.synonym import replace_synonyms, wordnet, wordnet_revision
from viewmill.storage.ids import canonical_json
from viewmill.storage.lake import Lake

from viewmill.specs import Seed


class Synonym(AugmenterConfig):
    """Replace about `ratio` of the content words with WordNet synonyms."""

    reusable_producer: ClassVar[bool] = True
    batch_invariant_views: ClassVar[bool] = True  # seeded per sentence
    method: Literal["synonym"] = "synonym"
    ratio: float = Field(0.3, gt=0, le=1)
    seed: Seed = 0

    @property
    def path_label(self) -> str:
        return "wordnet"

    def producer(self, lake: Lake | None) -> Producer:
        return SynonymProducer(self)


class MaskedLM(AugmenterConfig):
    """Mask about `ratio` of the tokens and fill them with a masked language model."""

    reusable_producer: ClassVar[bool] = True
    method: Literal["mlm"] = "mlm"
    model: str = "roberta-base"
    ratio: float = Field(0.2, gt=0, le=1)
    seed: Seed = 0
    device: str = "cpu"
    batch_size: int = Field(32, ge=1, le=65536)

    @property
    def path_label(self) -> str:
        return "mlm"

    def producer(self, lake: Lake | None) -> Producer:
        return MaskedLMProducer(self)


def replacement_view(text: str, engine: str, model: str, ratio: float, replaced: int, seed: int) -> ProducedView:
    decoding = canonical_json({"ratio": ratio, "replaced": replaced, "seed": seed})
    return ProducedView(text, Provenance(engines=[engine], models=[model], decoding=decoding))


class SynonymProducer:
    lang = None

    def __init__(self, spec: Synonym) -> None:
        self.spec = spec
        wordnet()  # fail now, with the install hint, rather than mid-run
        self.identity = [wordnet_revision()]

    def produce(self, chunk: list[tuple[str, str]], ctx: ProduceContext) -> list[ProducedView]:
        views = []
        for sid, text in chunk:
            seed = sentence_seed(self.spec.seed, sid)
            new_text, replaced = replace_synonyms(text, self.spec.ratio, seed)
            views.append(replacement_view(new_text, "wordnet", self.identity[0], self.spec.ratio, replaced, seed))
        return views

    def close(self) -> None:
        pass


class MaskedLMProducer:
    lang = None

    def __init__(self, spec: MaskedLM) -> None:
        from viewmill.augment.mlm import MaskedFiller

        self.spec = spec
        self.filler = MaskedFiller(spec.model, spec.device)
        self.identity = self.filler.identity()

    def produce(self, chunk: list[tuple[str, str]], ctx: ProduceContext) -> list[ProducedView]:
        model = "@".join(self.identity)
        views = []
        for start in range(0, len(chunk), self.spec.batch_size):
            part = chunk[start : start + self.spec.batch_size]
            seeds = [sentence_seed(self.spec.seed, sid) for sid, _ in part]
            filled = self.filler.fill([text for _, text in part], self.spec.ratio, seeds)
            for (text, replaced), seed in zip(filled, seeds, strict=True):
                views.append(replacement_view(text, "mlm", model, self.spec.ratio, replaced, seed))
        return views

    def close(self) -> None:
        pass
