"""Augmenter specs (as written in recipes), the producers that make their views, and the
augmenter registry: a spec class per method, viewmill's own and plugins' (entry-point
group `viewmill.augmenters`). A spec builds its producer; producers load no weights until
a batch needs them (see `viewmill.augment.models`)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import lru_cache
from typing import Annotated, Any, Literal, Protocol, Union

import pyarrow as pa
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    SerializeAsAny,
    Tag,
    TypeAdapter,
    WrapValidator,
    field_validator,
    model_validator,
)
from viewmill.augment.cache import CacheStats, translate_cached
from viewmill.augment.engines import ENGINES, DecodingSpec, TranslationEngine, make_engine
from viewmill.augment.synonym import replace_synonyms, wordnet, wordnet_revision
from viewmill.storage.ids import canonical_json, fingerprint
from viewmill.storage.lake import Lake
from viewmill.storage.registry import Registry, RegistryError

NAME = Field(pattern=r"^[A-Za-z0-9_.-]+$")


class AugmenterConfig(BaseModel):
    """Base of every augmenter spec, viewmill's and plugins': a recipe entry with a unique
    `name` and a `method` (the registry name, as a Literal with that default)."""

    model_config = ConfigDict(extra="forbid")

    name: str = NAME
    method: str

    @property
    def path_label(self) -> str:
        return self.method

    def producer(self, lake: Lake | None) -> Producer:
        """The producer of this spec's views; `lake` lets data-derived augmenters fingerprint their inputs."""
        raise NotImplementedError


class Translating(AugmenterConfig):
    """Engine settings shared by round trips and forward translation.

    Neural engines take `model` (one multilingual model for every leg, e.g. M2M100 or NLLB)
    or `models` (one per leg, e.g. facebook/wmt19-en-de then facebook/wmt19-de-en): hub
    ids or local directories.
    """

    engine: str = Field("apertium", description="a registered engine: apertium, hf, ctranslate2 or a plugin's")
    model: str | None = None
    models: list[str] | None = None
    device: str = "cpu"
    compute_type: str | None = Field(
        None, description="ctranslate2: int8, float16, bfloat16, float32; hf: float32, float16, bfloat16"
    )
    max_batch_tokens: int | None = Field(
        None, ge=64, description="neural engines: source tokens x beam per batch (default 4096 on CPU, 32768 on GPU)"
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
    """Forward translation into another language: the view is the translation itself."""

    method: Literal["forward"] = "forward"
    source: str = "en"
    target: str

    @property
    def legs(self) -> list[tuple[str, str]]:
        return [(self.source, self.target)]

    @property
    def path_label(self) -> str:
        return f"{self.source}>{self.target}"


class Identity(AugmenterConfig):
    """The sentence itself as a view (x1 = x in one-view recipes)."""

    method: Literal["identity"] = "identity"

    def producer(self, lake: Lake | None) -> Producer:
        return IdentityProducer(self)


class Synonym(AugmenterConfig):
    """Replace about `ratio` of the content words with WordNet synonyms."""

    method: Literal["synonym"] = "synonym"
    ratio: float = Field(0.3, gt=0, le=1)
    seed: int = 0

    @property
    def path_label(self) -> str:
        return "wordnet"

    def producer(self, lake: Lake | None) -> Producer:
        return SynonymProducer(self)


def _method(value: Any) -> str:
    """The augmenter's method; recipes may leave out `method: backtranslation`."""
    if isinstance(value, dict):
        return value.get("method", "backtranslation")
    return getattr(value, "method", "backtranslation")


class MaskedLM(AugmenterConfig):
    """Mask about `ratio` of the tokens and fill them with a masked language model."""

    method: Literal["mlm"] = "mlm"
    model: str = "roberta-base"
    ratio: float = Field(0.2, gt=0, le=1)
    seed: int = 0
    device: str = "cpu"
    batch_size: int = Field(32, ge=1)

    @property
    def path_label(self) -> str:
        return "mlm"

    def producer(self, lake: Lake | None) -> Producer:
        return MaskedLMProducer(self)


class Entailment(AugmenterConfig):
    """Labelled NLI data: a premise's view is a hypothesis it entails (SimCSE's supervised
    positives). Sentences that are no premise of such a pair get a rejected view."""

    method: Literal["entailment"] = "entailment"
    labels: list[str] = Field(["entailment"], min_length=1, description="gold labels that count as a positive")
    seed: int = Field(0, description="picks one hypothesis when a premise has several")

    @property
    def path_label(self) -> str:
        return "nli:" + "+".join(self.labels)

    def producer(self, lake: Lake | None) -> Producer:
        return EntailmentProducer(self, lake)


def _spec_class(value: object) -> type[AugmenterConfig]:
    if not (isinstance(value, type) and issubclass(value, AugmenterConfig)):
        raise RegistryError(f"an augmenter entry must be a subclass of AugmenterConfig, not {value!r}")
    return value


AUGMENTERS: Registry[type[AugmenterConfig]] = Registry(
    "viewmill.augmenters",
    "augmenter method",
    {
        "backtranslation": "viewmill.augment.augmenters:BackTranslation",
        "forward": "viewmill.augment.augmenters:Forward",
        "identity": "viewmill.augment.augmenters:Identity",
        "synonym": "viewmill.augment.augmenters:Synonym",
        "mlm": "viewmill.augment.augmenters:MaskedLM",
        "entailment": "viewmill.augment.augmenters:Entailment",
    },
    check=_spec_class,
)


def _spec_adapter() -> TypeAdapter:
    """A tagged union of every registered spec class, looked up when a recipe is validated
    (so plugins installed since import count)."""
    classes = {}
    for method in AUGMENTERS.names():
        cls = AUGMENTERS.get(method)
        if cls.model_fields["method"].default != method:
            raise RegistryError(f"augmenter '{method}' ({cls.__name__}) must declare method: Literal['{method}']")
        classes[method] = cls
    return _adapter_for(tuple(classes.items()))


@lru_cache(maxsize=16)
def _adapter_for(classes: tuple[tuple[str, type[AugmenterConfig]], ...]) -> TypeAdapter:
    members = [Annotated[cls, Tag(method)] for method, cls in classes]
    return TypeAdapter(
        Annotated[
            Union[tuple(members)],  # noqa: UP007 - built at run time from the registry
            Discriminator(
                _method,
                custom_error_type="unknown_method",
                custom_error_message=f"method must be one of {', '.join(method for method, _ in classes)}",
            ),
        ]
    )


def _validate_spec(value: Any, handler: Any) -> AugmenterConfig:
    if isinstance(value, AugmenterConfig):
        return value
    try:
        adapter = _spec_adapter()
    except RegistryError as exc:
        raise ValueError(str(exc)) from None
    return adapter.validate_python(value)


# A recipe's augmenter: whichever registered spec its `method` names (default backtranslation).
AugmenterSpec = Annotated[SerializeAsAny[AugmenterConfig], WrapValidator(_validate_spec)]


@dataclass
class ProducedView:
    text: str
    provenance: dict[str, Any]
    reason: str | None = None  # the producer's own rejection, e.g. no entailed hypothesis


class Producer(Protocol):
    identity: list[Any]  # what besides the spec decides the output (engines and versions)
    lang: str | None  # the views' language; None: the sentence's own

    def produce(self, lake: Lake, chunk: list[tuple[str, str]], run_id: str, stats: CacheStats) -> list[ProducedView]:
        """One view per (sentence_id, text), in order."""
        ...

    def close(self) -> None: ...


class TranslationProducer:
    """Chains the spec's legs: a round trip back to the source, or one forward leg."""

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
    lang = None

    def __init__(self, spec: Identity) -> None:
        self.spec = spec
        self.identity: list[Any] = []

    def produce(self, lake: Lake, chunk: list[tuple[str, str]], run_id: str, stats: CacheStats) -> list[ProducedView]:
        empty = {"engines": [], "models": [], "decoding": None, "cache_keys": []}
        return [ProducedView(text, empty) for _, text in chunk]

    def close(self) -> None:
        pass


def sentence_seed(seed: int, sentence_id: str) -> int:
    """Seeded per sentence, so a view does not depend on how the corpus was chunked."""
    return int(fingerprint(seed, sentence_id)[:8], 16)


def replacement_view(text: str, engine: str, model: str, ratio: float, replaced: int, seed: int) -> ProducedView:
    decoding = canonical_json({"ratio": ratio, "replaced": replaced, "seed": seed})
    return ProducedView(text, {"engines": [engine], "models": [model], "decoding": decoding, "cache_keys": []})


class SynonymProducer:
    lang = None

    def __init__(self, spec: Synonym) -> None:
        self.spec = spec
        wordnet()  # fail now, with the install hint, rather than mid-run
        self.identity = [wordnet_revision()]

    def produce(self, lake: Lake, chunk: list[tuple[str, str]], run_id: str, stats: CacheStats) -> list[ProducedView]:
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

    def produce(self, lake: Lake, chunk: list[tuple[str, str]], run_id: str, stats: CacheStats) -> list[ProducedView]:
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


class EntailmentProducer:
    lang = None
    NO_PAIR = "no_entailment_pair"

    def __init__(self, spec: Entailment, lake: Lake | None) -> None:
        self.spec = spec
        # The links decide the views: re-ingested NLI data with new pairs is a new configuration.
        digest = None
        if lake is not None:
            digest = lake.scalar(
                "SELECT format('{}:{}', count(*), coalesce(bit_xor(hash(premise_id, hypothesis_id, label)), 0)) "
                "FROM nli_pairs"
            )
        self.identity = [digest]

    def produce(self, lake: Lake, chunk: list[tuple[str, str]], run_id: str, stats: CacheStats) -> list[ProducedView]:
        wanted = pa.table({"sentence_id": [sid for sid, _ in chunk]})
        with lake.with_keys("_premises", wanted):
            table = lake.arrow(
                f"""
                SELECT DISTINCT n.premise_id, n.hypothesis_id, n.hypothesis_text
                FROM nli_pairs n JOIN _premises p ON n.premise_id = p.sentence_id
                WHERE n.label IN ({", ".join("?" for _ in self.spec.labels)}) AND n.hypothesis_id <> n.premise_id
                ORDER BY n.premise_id, n.hypothesis_id
                """,
                self.spec.labels,
            )
        partners: dict[str, list[tuple[str, str]]] = {}
        for row in table.to_pylist():
            partners.setdefault(row["premise_id"], []).append((row["hypothesis_id"], row["hypothesis_text"]))
        views = []
        for sid, _ in chunk:
            options = partners.get(sid)
            if not options:
                provenance = {"engines": [], "models": [], "decoding": None, "cache_keys": []}
                views.append(ProducedView("", provenance, reason=self.NO_PAIR))
                continue
            hypothesis_id, text = options[sentence_seed(self.spec.seed, sid) % len(options)]
            provenance = {"engines": ["nli"], "models": [], "decoding": None, "cache_keys": [hypothesis_id]}
            views.append(ProducedView(text, provenance))
        return views

    def close(self) -> None:
        pass


def make_producer(spec: AugmenterConfig, lake: Lake | None = None) -> Producer:
    """The producer for a spec; `lake` lets data-derived augmenters (entailment) fingerprint their inputs."""
    return spec.producer(lake)
