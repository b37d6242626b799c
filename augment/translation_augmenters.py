"""Translation augmenters: round trips through pivot languages (`backtranslation`) and
forward translation (`forward`, straight or through `pivots`), and the producer that chains
their engines' legs through the translation cache.

Each leg (hop) is one engine call keyed in the cache on its own, so a hop two augmenters share
(en>es, under fwd_es and under fwd_fr by way of es) is translated once. A view records its
chain: `path` names the languages (en>es>fr), and its provenance lists each hop's engine,
model@revision and cache key in path order (`chain_hops` reads them back together).
"""

from __future__ import annotations

import itertools
from typing import Any, ClassVar, Literal

from pydantic import Field, SerializerFunctionWrapHandler, field_validator, model_serializer, model_validator
from viewmill.augment.augmenter_base import AugmenterConfig, ProduceContext, ProducedView, Producer, Provenance
from viewmill.augment.cache import batch_variant_chunk, translate_cached
from viewmill.augment.engines import ENGINES, DecodingSpec, TranslationEngine, make_engine
from viewmill.storage.lake import Lake

from viewmill.registry import RegistryError


class Translating(AugmenterConfig):
    """Engine settings shared by round trips and forward translation.

    Neural engines take `model` (one multilingual model for every leg, e.g. M2M100 or NLLB)
    or `models` (one per leg, e.g. facebook/wmt19-en-de then facebook/wmt19-de-en): hub
    ids or local directories.
    """

    reusable_producer: ClassVar[bool] = True
    engine: str = Field("apertium", description="a registered engine: apertium, hf, ctranslate2 or a plugin's")
    model: str | None = None
    models: list[str] | None = None
    device: str = "cpu"
    compute_type: str | None = Field(
        None, description="ctranslate2: int8, float16, bfloat16, float32; hf: float32, float16, bfloat16"
    )
    max_batch_tokens: int | None = Field(
        None,
        ge=64,
        le=1 << 24,
        description="neural engines: source tokens x beam per batch (default 4096 on CPU, 32768 on GPU)",
    )
    decoding: DecodingSpec = DecodingSpec()

    @property
    def legs(self) -> list[tuple[str, str]]:
        raise NotImplementedError

    @model_validator(mode="after")
    def _models_fit_the_engine(self):
        legs = len(self.legs)
        try:
            needs_model = ENGINES.get(self.engine).needs_model
        except RegistryError as exc:
            raise ValueError(str(exc)) from None
        if not needs_model and (self.model or self.models):
            raise ValueError(f"{self.engine} takes no model: remove model/models or choose engine hf or ctranslate2")
        if needs_model:
            if bool(self.model) == bool(self.models):
                raise ValueError(f"engine {self.engine} needs either model (one for all legs) or models (one per leg)")
            if self.models is not None and len(self.models) != legs:
                raise ValueError(f"models has {len(self.models)} entries for {legs} translation legs")
        return self

    def model_for(self, leg: int) -> str | None:
        return self.models[leg] if self.models else self.model

    def producer(self, lake: Lake | None) -> Producer:
        return TranslationProducer(self)

    def views_batch_invariant(self) -> bool:
        return ENGINES.get(self.engine).batch_invariant


class BackTranslation(Translating):
    """A round trip through one or more pivots, e.g. path [en, es, en] or [en, de, fr, en]."""

    method: Literal["backtranslation"] = "backtranslation"
    path: list[str] = Field(min_length=3)

    @field_validator("path")
    @classmethod
    def _round_trip(cls, path: list[str]) -> list[str]:
        if path[0] != path[-1]:
            raise ValueError(f"a round trip must end in its source language: {'>'.join(path)}")
        return path

    @property
    def legs(self) -> list[tuple[str, str]]:
        return list(itertools.pairwise(self.path))

    @property
    def path_label(self) -> str:
        return ">".join(self.path)


class Forward(Translating):
    """Forward translation into another language: the view is the translation itself.

    `pivots` are languages the translation passes through, one engine hop each: source en,
    pivots [es], target fr is en>es>fr. `pivots: [es, fr]` says the same (a chain ending in its
    target; `target` may then be left out)."""

    method: Literal["forward"] = "forward"
    source: str = "en"
    target: str
    pivots: list[str] = Field(default_factory=list, description="languages passed through on the way to target")

    @model_validator(mode="before")
    @classmethod
    def _chain_ends_in_target(cls, data: Any) -> Any:
        """`pivots: [es, fr]` (target fr or none) is read as pivots [es], target fr."""
        if isinstance(data, dict) and data.get("pivots"):
            pivots = list(data["pivots"])
            if data.get("target") in (None, pivots[-1]):
                data = {**data, "target": pivots[-1], "pivots": pivots[:-1]}
        return data

    @model_validator(mode="after")
    def _each_language_once(self):
        path = [self.source, *self.pivots, self.target]
        if len(set(path)) != len(path):
            raise ValueError(f"a forward chain passes each language once: {'>'.join(path)}")
        return self

    @model_serializer(mode="wrap")
    def _no_pivots_no_key(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A straight forward augmenter dumps (and hashes) as before pivots existed: its views stay current."""
        data = handler(self)
        if not self.pivots:
            data.pop("pivots", None)
        return data

    @property
    def legs(self) -> list[tuple[str, str]]:
        return list(itertools.pairwise([self.source, *self.pivots, self.target]))

    @property
    def path_label(self) -> str:
        return ">".join([self.source, *self.pivots, self.target])


def chain_hops(path: str, provenance: Provenance) -> list[dict[str, str]]:
    """A translated view's hops in order: engine, model@revision, src, tgt and cache key each
    (its `path` and provenance, stored side by side, read together)."""
    langs = path.split(">")
    legs = list(itertools.pairwise(langs))
    if not (len(legs) == len(provenance.engines) == len(provenance.models) == len(provenance.cache_keys)):
        raise ValueError(f"path {path} has {len(legs)} hops, its provenance {len(provenance.engines)} engines")
    return [
        {"engine": engine, "model": model, "src": src, "tgt": tgt, "cache_key": key}
        for (src, tgt), engine, model, key in zip(
            legs, provenance.engines, provenance.models, provenance.cache_keys, strict=True
        )
    ]


class TranslationProducer:
    """Chains the spec's legs: a round trip back to the source, or forward through any pivots."""

    def __init__(self, spec: BackTranslation | Forward) -> None:
        self.spec = spec
        self.legs = spec.legs
        self.lang = self.legs[-1][1]
        self.engines: list[TranslationEngine] = []
        try:
            for leg, (src, tgt) in enumerate(self.legs):
                engine = make_engine(
                    spec.engine, src, tgt, spec.model_for(leg), spec.device, spec.compute_type, spec.max_batch_tokens
                )
                self.engines.append(engine)
        except BaseException:
            self.close()
            raise
        self.identity = [(e.name, e.model, e.revision) for e in self.engines]
        # An engine whose output is batch invariant commits each leg's translations of a views
        # chunk at once (that chunk is sized to about a second of work); others in fixed chunks.
        self.commit_chunk = None if spec.views_batch_invariant() else batch_variant_chunk(spec.device)

    def produce(self, chunk: list[tuple[str, str]], ctx: ProduceContext) -> list[ProducedView]:
        texts = [text for _, text in chunk]
        keys: list[list[str]] = [[] for _ in chunk]
        for engine, (src, tgt) in zip(self.engines, self.legs, strict=True):
            translated, leg_stats = translate_cached(
                ctx.lake, engine, texts, src, tgt, self.spec.decoding, run_id=ctx.run_id, chunk_size=self.commit_chunk
            )
            ctx.cache.add(leg_stats)
            for i, text in enumerate(texts):
                keys[i].append(translated[text][1])
            texts = [translated[text][0] for text in texts]
        engines = [e.name for e in self.engines]
        models = [f"{e.model}@{e.revision}" for e in self.engines]
        decoding = self.spec.decoding.canonical()
        return [
            ProducedView(text, Provenance(engines=engines, models=models, decoding=decoding, cache_keys=k))
            for text, k in zip(texts, keys, strict=True)
        ]

    def close(self) -> None:
        for engine in self.engines:
            engine.close()
