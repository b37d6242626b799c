"""What every augmenter shares: `AugmenterConfig` (the base of each recipe entry's spec),
`Producer` (what makes a spec's views) and `ProducedView`, and per-sentence seeds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field
from viewmill.augment.cache import CacheStats
from viewmill.storage.ids import fingerprint
from viewmill.storage.lake import Lake

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


def sentence_seed(seed: int, sentence_id: str) -> int:
    """Seeded per sentence, so a view does not depend on how the corpus was chunked."""
    return int(fingerprint(seed, sentence_id)[:8], 16)
