"""Augmenters whose views come from the data, not a model: the sentence itself (`identity`)
and a hypothesis that labelled NLI data says it entails (`entailment`)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import pyarrow as pa
from pydantic import Field
from viewmill.augment.augmenter_base import (
    AugmenterConfig,
    ProduceContext,
    ProducedView,
    Producer,
    Provenance,
    sentence_seed,
)
from viewmill.storage.lake import Lake

from viewmill.specs import Seed


class Identity(AugmenterConfig):
    """The sentence itself as a view (x1 = x in one-view recipes)."""

    reusable_producer: ClassVar[bool] = True
    batch_invariant_views: ClassVar[bool] = True
    exempt_from_filters: ClassVar[bool] = True
    is_source_copy: ClassVar[bool] = True
    method: Literal["identity"] = "identity"

    def producer(self, lake: Lake | None) -> Producer:
        return IdentityProducer(self)


class Entailment(AugmenterConfig):
    """Labelled NLI data: a premise's view is a hypothesis it entails (SimCSE's supervised
    positives). Sentences that are no premise of such a pair get a rejected view."""

    reusable_producer: ClassVar[bool] = True
    batch_invariant_views: ClassVar[bool] = True
    exempt_from_filters: ClassVar[bool] = True  # people wrote the hypotheses to differ from the premise
    needs_nli_links: ClassVar[bool] = True
    method: Literal["entailment"] = "entailment"
    labels: list[str] = Field(["entailment"], min_length=1, description="gold labels that count as a positive")
    seed: Seed = Field(0, description="picks one hypothesis when a premise has several")

    @property
    def path_label(self) -> str:
        return "nli:" + "+".join(self.labels)

    def producer(self, lake: Lake | None) -> Producer:
        return EntailmentProducer(self, lake)


class IdentityProducer:
    lang = None

    def __init__(self, spec: Identity) -> None:
        self.spec = spec
        self.identity: list[Any] = []

    def produce(self, chunk: list[tuple[str, str]], ctx: ProduceContext) -> list[ProducedView]:
        return [ProducedView(text) for _, text in chunk]

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

    def produce(self, chunk: list[tuple[str, str]], ctx: ProduceContext) -> list[ProducedView]:
        wanted = pa.table({"sentence_id": [sid for sid, _ in chunk]})
        with ctx.lake.with_keys("_premises", wanted):
            table = ctx.lake.arrow(
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
                views.append(ProducedView("", reason=self.NO_PAIR))
                continue
            hypothesis_id, text = options[sentence_seed(self.spec.seed, sid) % len(options)]
            views.append(ProducedView(text, Provenance(engines=["nli"], cache_keys=[hypothesis_id])))
        return views

    def close(self) -> None:
        pass
