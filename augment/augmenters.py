"""Augmenter specs (as written in recipes) and the producers that make their views."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator

from augment.cache import CacheStats, translate_cached
from augment.engines import DecodingSpec, TranslationEngine, make_engine
from augment.synonym import replace_synonyms, wordnet, wordnet_revision
from storage.ids import fingerprint
from storage.lake import Lake

NAME = Field(pattern=r"^[A-Za-z0-9_.-]+$")


class BackTranslation(BaseModel):
    """A round trip through one or more pivots, e.g. path [en, es, en] or [en, de, fr, en]."""

    model_config = ConfigDict(extra="forbid")

    name: str = NAME
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


class Identity(BaseModel):
    """The sentence itself as a view (x1 = x in one-view recipes)."""

    model_config = ConfigDict(extra="forbid")

    name: str = NAME
    method: Literal["identity"] = "identity"

    @property
    def path_label(self) -> str:
        return "identity"


class Synonym(BaseModel):
    """Replace about `ratio` of the content words with WordNet synonyms."""

    model_config = ConfigDict(extra="forbid")

    name: str = NAME
    method: Literal["synonym"] = "synonym"
    ratio: float = Field(0.3, gt=0, le=1)
    seed: int = 0

    @property
    def path_label(self) -> str:
        return "wordnet"


def _method(value: Any) -> str:
    """The augmenter's method; recipes may leave out `method: backtranslation`."""
    if isinstance(value, dict):
        return value.get("method", "backtranslation")
    return getattr(value, "method", "backtranslation")


AugmenterSpec = Annotated[
    Annotated[BackTranslation, Tag("backtranslation")]
    | Annotated[Identity, Tag("identity")]
    | Annotated[Synonym, Tag("synonym")],
    Discriminator(
        _method,
        custom_error_type="unknown_method",
        custom_error_message="method must be one of backtranslation, identity, synonym",
    ),
]


@dataclass
class ProducedView:
    text: str
    provenance: dict[str, Any]


class Producer(Protocol):
    identity: list[Any]  # what besides the spec decides the output (engines and versions)
    lang: str

    def produce(self, lake: Lake, chunk: list[tuple[str, str]], run_id: str, stats: CacheStats) -> list[ProducedView]:
        """One view per (sentence_id, text), in order."""
        ...

    def close(self) -> None: ...


class RoundTripProducer:
    def __init__(self, spec: BackTranslation) -> None:
        self.spec = spec
        self.lang = spec.path[-1]
        self.legs = list(itertools.pairwise(spec.path))
        self.engines: list[TranslationEngine] = []
        try:
            self.engines.extend(make_engine(spec.engine, src, tgt) for src, tgt in self.legs)
        except BaseException:
            self.close()
            raise
        self.identity = [(e.name, e.model, e.revision) for e in self.engines]

    def produce(self, lake: Lake, chunk: list[tuple[str, str]], run_id: str, stats: CacheStats) -> list[ProducedView]:
        texts = [text for _, text in chunk]
        keys: list[list[str]] = [[] for _ in chunk]
        for engine, (src, tgt) in zip(self.engines, self.legs, strict=True):
            translated, leg_stats = translate_cached(lake, engine, texts, src, tgt, self.spec.decoding, run_id=run_id)
            stats.add(leg_stats)
            for i, text in enumerate(texts):
                keys[i].append(translated[text][1])
            texts = [translated[text][0] for text in texts]
        provenance = {
            "engines": [e.name for e in self.engines],
            "models": [f"{e.model}@{e.revision}" for e in self.engines],
            "decoding": self.spec.decoding.canonical(),
        }
        return [ProducedView(text, {**provenance, "cache_keys": k}) for text, k in zip(texts, keys, strict=True)]

    def close(self) -> None:
        for engine in self.engines:
            engine.close()


class IdentityProducer:
    lang = "en"

    def __init__(self, spec: Identity) -> None:
        self.spec = spec
        self.identity: list[Any] = []

    def produce(self, lake: Lake, chunk: list[tuple[str, str]], run_id: str, stats: CacheStats) -> list[ProducedView]:
        empty = {"engines": [], "models": [], "decoding": None, "cache_keys": []}
        return [ProducedView(text, empty) for _, text in chunk]

    def close(self) -> None:
        pass


class SynonymProducer:
    lang = "en"

    def __init__(self, spec: Synonym) -> None:
        self.spec = spec
        wordnet()  # fail now, with the install hint, rather than mid-run
        self.identity = [wordnet_revision()]

    def produce(self, lake: Lake, chunk: list[tuple[str, str]], run_id: str, stats: CacheStats) -> list[ProducedView]:
        views = []
        for sid, text in chunk:
            # Seeded per sentence, so a view does not depend on how the corpus was chunked.
            seed = int(fingerprint(self.spec.seed, sid)[:8], 16)
            new_text, replaced = replace_synonyms(text, self.spec.ratio, seed)
            decoding = f'{{"ratio":{self.spec.ratio},"replaced":{replaced},"seed":{seed}}}'
            views.append(
                ProducedView(
                    new_text, {"engines": ["wordnet"], "models": self.identity, "decoding": decoding, "cache_keys": []}
                )
            )
        return views

    def close(self) -> None:
        pass


def make_producer(spec: BackTranslation | Identity | Synonym) -> Producer:
    if isinstance(spec, BackTranslation):
        return RoundTripProducer(spec)
    if isinstance(spec, Synonym):
        return SynonymProducer(spec)
    return IdentityProducer(spec)
