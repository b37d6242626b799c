"""What every augmenter shares: `AugmenterConfig` (the base of each recipe entry's spec, with
the capabilities the rest of viewmill reads from its class), `Producer` (what makes a spec's
views, given a `ProduceContext`), `ProducedView` and its `Provenance`, and per-sentence seeds."""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from pydantic import BaseModel, ConfigDict, Field
from viewmill.augment.cache import CacheStats
from viewmill.storage.ids import fingerprint
from viewmill.storage.lake import Lake

from viewmill.specs import Spec

NAME = Field(pattern=r"^[A-Za-z0-9_.-]+$")


class AugmenterConfig(Spec):
    """Base of every augmenter spec, viewmill's and plugins': a recipe entry with a unique
    `name` and a `method` (the registry name, as a Literal with that default).

    The class variables are capabilities, the same for built-ins and plugins (set them on the
    subclass); they are no fields, so no configuration hash depends on them."""

    # Only the emptiness check judges its views: no length, chrF or meaning filter (they are
    # the source itself, or texts people wrote to differ from it). Cosines are still recorded.
    exempt_from_filters: ClassVar[bool] = False
    # Its views are the source sentence: the views report leaves them out of diversity (self-BLEU).
    is_source_copy: ClassVar[bool] = False
    # It reads the corpus's labelled NLI pairs (`nli_pairs`): ingest collects them, and the
    # recipe needs a corpus format whose reader yields them.
    needs_nli_links: ClassVar[bool] = False
    # Its producer may be closed and used again (the next batch restarts what closing stopped):
    # a run then builds it once per process and lends it to one shard at a time. Left False,
    # a producer is built for each use.
    reusable_producer: ClassVar[bool] = False
    # Each sentence's view is the same whichever sentences share its batch (no padding or
    # batch statistics): its commits may then be sized by time without changing a view.
    batch_invariant_views: ClassVar[bool] = False

    name: str = NAME
    method: str

    @property
    def path_label(self) -> str:
        return self.method

    def producer(self, lake: Lake | None) -> Producer:
        """The producer of this spec's views; `lake` lets data-derived augmenters fingerprint their inputs."""
        raise NotImplementedError

    def views_batch_invariant(self) -> bool:
        """Whether the views come out the same however the sentences are batched."""
        return self.batch_invariant_views


class Provenance(BaseModel):
    """Where a view came from, stored as the `views.provenance` struct (the same four fields)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Factories, not `= []`: pydantic deep-copies a mutable default, 6x the cost of a view's bookkeeping.
    engines: list[str] = Field(default_factory=list)  # what made it: engines, "wordnet", "mlm", "nli"
    models: list[str] = Field(default_factory=list)  # model@revision per engine
    decoding: str | None = None  # canonical JSON of the settings that decided the text
    cache_keys: list[str] = Field(default_factory=list)  # translation cache keys per leg; the NLI hypothesis id


@dataclass
class ProducedView:
    text: str
    provenance: Provenance = field(default_factory=Provenance)
    reason: str | None = None  # the producer's own rejection, e.g. no entailed hypothesis

    def __post_init__(self) -> None:
        if isinstance(self.provenance, Mapping):  # producers written before Provenance: validated the same
            self.provenance = Provenance.model_validate(self.provenance)


@dataclass(frozen=True)
class ProduceContext:
    """What a producer may use besides the sentences: the lake (the translation cache, NLI
    pairs), the run writing the views, and the cache counts it adds its hits and misses to."""

    lake: Lake
    run_id: str
    cache: CacheStats


class Producer(Protocol):
    identity: list[Any]  # what besides the spec decides the output (engines and versions)
    lang: str | None  # the views' language; None: the sentence's own

    def produce(self, chunk: list[tuple[str, str]], ctx: ProduceContext) -> list[ProducedView]:
        """One view per (sentence_id, text), in order."""
        ...

    def close(self) -> None: ...


class _LegacyProducer:
    """A producer written against produce(lake, chunk, run_id, stats), called as a current one."""

    def __init__(self, producer: Any) -> None:
        self.producer = producer
        self.identity, self.lang = producer.identity, producer.lang

    def produce(self, chunk: list[tuple[str, str]], ctx: ProduceContext) -> list[ProducedView]:
        return self.producer.produce(ctx.lake, chunk, ctx.run_id, ctx.cache)

    def close(self) -> None:
        self.producer.close()


def current_producer(producer: Any, method: str) -> Producer:
    """`producer`, or an adapter when its `produce` still takes (lake, chunk, run_id, stats)
    (with a DeprecationWarning naming the new signature)."""
    try:
        parameters = inspect.signature(producer.produce).parameters.values()
    except (TypeError, ValueError):  # a builtin or C callable: taken as current
        return producer
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if sum(p.kind in positional for p in parameters) != 4:
        return producer
    warnings.warn(
        f"augmenter '{method}': {type(producer).__name__}.produce(lake, chunk, run_id, stats) is the old "
        "signature; write produce(self, chunk, ctx) and read ctx.lake, ctx.run_id and ctx.cache",
        DeprecationWarning,
        stacklevel=3,
    )
    return _LegacyProducer(producer)


def sentence_seed(seed: int, sentence_id: str) -> int:
    """Seeded per sentence, so a view does not depend on how the corpus was chunked."""
    return int(fingerprint(seed, sentence_id)[:8], 16)
