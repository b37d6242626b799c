"""Views filtered by meaning: the cosine between a view and its source under a named encoder
(below the floor the meaning changed, above the ceiling nothing changed), and near-duplicate
views of one sentence from different augmenters of a recipe.

The encoder comes in as `embed` (texts -> one row per text): the augment stage builds it
from the recipe's encoder and injects it, so this layer loads no model of its own.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import regex
from pydantic import Field, SerializerFunctionWrapHandler, field_validator, model_serializer, model_validator
from viewmill.augment.augmenters import augmenter_class
from viewmill.storage.embeddings import PendingEmbeddings
from viewmill.storage.lake import Lake

from viewmill.specs import Spec

Embed = Callable[[list[str]], np.ndarray]  # texts -> one embedding per row
DEVICE_PATTERN = r"^(cpu|cuda|mps|xpu)(:\d+)?$"  # torch's device names a sentence encoder runs on
NEAR_DUPLICATE = "near-duplicate"  # the reason's kind; the reason is "near-duplicate:<view_id>"
_PUNCTUATION = regex.compile(r"\p{P}+")


class MeaningSpec(Spec):
    """`filters.meaning` in a recipe: cosine to the source within [min_cosine, max_cosine],
    and no near-duplicate of a view an earlier augmenter of the recipe kept."""

    encoder: str = Field("embedded:all-MiniLM-L6-v2", description="embedded:NAME, a model directory or a hub id")
    min_cosine: float = Field(0.7, ge=-1, le=1, description="below: the meaning changed (rejected)")
    max_cosine: float = Field(0.98, ge=-1, le=1, description="above: nothing changed (rejected); 1 turns it off")
    near_duplicate: float | None = Field(
        None,
        ge=-1,
        le=1,
        description="a view whose cosine to an earlier augmenter's kept view of the sentence is above this is a "
        "near-duplicate (so is one equal to it up to case, punctuation and spaces); default max_cosine, 1: text only",
    )
    # Left out of the spec's dump on the CPU (`_without_cpu`), so views filtered before the setting
    # existed keep their configuration hashes; a GPU's cosines differ in their last digits, so its hash differs.
    device: str = Field("cpu", pattern=DEVICE_PATTERN, description="where the encoder embeds: cpu, cuda or cuda:N")

    @field_validator("device")
    @classmethod
    def _one_name_for_the_cpu(cls, device: str) -> str:
        return "cpu" if device.split(":")[0] == "cpu" else device

    @model_serializer(mode="wrap")
    def _without_cpu(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        if self.device == "cpu":
            data.pop("device", None)
        return data

    @model_validator(mode="after")
    def _floor_below_ceiling(self) -> MeaningSpec:
        if self.min_cosine > self.max_cosine:
            raise ValueError(
                f"min_cosine {self.min_cosine:g} is above max_cosine {self.max_cosine:g}: every view would be "
                "rejected; lower min_cosine or raise max_cosine"
            )
        if self.near_duplicate is None:  # written out, so both spellings hash alike
            self.near_duplicate = self.max_cosine
        return self


@dataclass(frozen=True)
class Reference:
    """A view an earlier augmenter kept for the same sentence."""

    view_id: str
    text: str


@dataclass(frozen=True)
class Candidate:
    source: str
    text: str
    method: str
    rejected: bool = False  # another filter rejected it already: only its cosine is recorded
    references: tuple[Reference, ...] = ()


@dataclass(frozen=True)
class Verdict:
    cosine: float | None  # to the source; None for an empty view
    reason: str | None  # this filter's rejection, if any


def normalised(text: str) -> str:
    """The text as near-duplicates compare it: NFKC, case-folded, Unicode punctuation removed,
    runs of whitespace as one space, stripped ("Hello, World!" and "hello world" are equal)."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(_PUNCTUATION.sub("", folded).split())


def cosine_reason(cosine: float, spec: MeaningSpec) -> str | None:
    if cosine < spec.min_cosine:
        return f"cosine<{spec.min_cosine:g}"
    if cosine > spec.max_cosine:
        return f"cosine>{spec.max_cosine:g}"
    return None


def _embed_missing(embed: Embed, texts: Sequence[str], known: dict[str, np.ndarray]) -> None:
    """Unit vectors of the texts not in `known` yet, each distinct text embedded once, in one call."""
    todo = list(dict.fromkeys(t for t in texts if t not in known))
    if not todo:
        return
    matrix = np.asarray(embed(todo), dtype=np.float64)
    if matrix.ndim != 2 or matrix.shape[0] != len(todo):
        raise ValueError(f"the meaning encoder returned shape {matrix.shape} for {len(todo)} texts: one row per text")
    matrix /= np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)
    known.update(zip(todo, matrix, strict=True))


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.clip(a @ b, -1.0, 1.0))  # rounding can leave 1 + 1e-16 for equal texts


def _duplicated(candidate: Candidate, vectors: dict[str, np.ndarray], threshold: float) -> Reference | None:
    key = normalised(candidate.text)
    for ref in candidate.references:
        if normalised(ref.text) == key or _cosine(vectors[candidate.text], vectors[ref.text]) > threshold:
            return ref
    return None


def judge(candidates: Sequence[Candidate], spec: MeaningSpec, embed: Embed) -> list[Verdict]:
    """Each candidate's cosine to its source and this filter's verdict, in order. The first
    failure wins: cosine below min_cosine, above max_cosine, then a near-duplicate of the first
    reference (in the recipe's order) it equals after `normalised` or whose cosine to it is
    above `near_duplicate`. Views of methods exempt from filters (their class's
    `exempt_from_filters`) and views already rejected only get their cosine."""
    vectors: dict[str, np.ndarray] = {}
    present = [i for i, c in enumerate(candidates) if c.text.strip()]
    _embed_missing(embed, [t for i in present for t in (candidates[i].source, candidates[i].text)], vectors)
    cosines = {i: _cosine(vectors[candidates[i].source], vectors[candidates[i].text]) for i in present}
    exempt = {method: augmenter_class(method).exempt_from_filters for method in {c.method for c in candidates}}
    judged = [i for i in present if not candidates[i].rejected and not exempt[candidates[i].method]]
    reasons = {i: cosine_reason(cosines[i], spec) for i in judged}
    survivors = [candidates[i] for i, reason in reasons.items() if reason is None]
    _embed_missing(embed, [ref.text for c in survivors for ref in c.references], vectors)
    assert spec.near_duplicate is not None  # the spec's validator fills it in
    for i, reason in reasons.items():
        if reason is None and (ref := _duplicated(candidates[i], vectors, spec.near_duplicate)) is not None:
            reasons[i] = f"{NEAR_DUPLICATE}:{ref.view_id}"
    return [Verdict(cosines.get(i), reasons.get(i)) for i in range(len(candidates))]


@dataclass(frozen=True)
class MeaningJudge:
    """The meaning filter for one augmenter: the encoder (its weights' fingerprint and how it
    embeds) and the configurations of the recipe's augmenters listed before this one, whose
    kept views this one's must not duplicate. `identity` enters the configuration hash."""

    encoder_identity: str
    embed: Embed
    earlier: tuple[str, ...] = ()
    precision: str = "fp32"  # the encoder's autocast (bf16 judges' identities say so)
    embedding_key: str = ""  # the encoder's name in the lake's embedding store
    store: bool = False  # store what it embeds in the lake (the recipe mines with this encoder)

    @property
    def identity(self) -> list[Any]:
        return [self.encoder_identity, list(self.earlier)]

    def apply(
        self,
        lake: Lake,
        spec: MeaningSpec,
        rows: list[dict],
        sources: list[str],
        pending: PendingEmbeddings | None = None,
    ) -> None:
        """Record each `views` row's cosine to its source and reject, in place, the rows this
        filter fails. `pending`: where the texts it embeds go with their rows, for the lake's
        embedding store (the recipe mines with this encoder); the verdicts are the same either way."""
        references = self._references(lake, [row["sentence_id"] for row in rows])
        candidates = [
            Candidate(source, row["text"], row["method"], row["status"] == "rejected", references[row["sentence_id"]])
            for row, source in zip(rows, sources, strict=True)
        ]
        embed = self.embed if pending is None else _recording(self.embed, pending)
        for row, verdict in zip(rows, judge(candidates, spec, embed), strict=True):
            row["quality"]["cosine_to_source"] = verdict.cosine
            if verdict.reason is not None:
                row["status"], row["reject_reason"] = "rejected", verdict.reason

    def pending(self) -> PendingEmbeddings | None:
        """A shard's buffer for the embedding store, where this judge stores (`store`)."""
        return PendingEmbeddings(self.embedding_key) if self.store else None

    def _references(self, lake: Lake, sentence_ids: list[str]) -> dict[str, tuple[Reference, ...]]:
        """Per sentence, the earlier configurations' kept views in the recipe's order. Every
        earlier configuration must have judged every sentence already, or verdicts would depend
        on which shard finished first."""
        found: dict[str, list[tuple[int, Reference]]] = {sid: [] for sid in sentence_ids}
        if not self.earlier or not sentence_ids:
            return {sid: () for sid in found}
        wanted = pa.table({"sentence_id": pa.array(sentence_ids, pa.string())})
        with lake.with_keys("_judged", wanted):
            rows = lake.arrow(
                "SELECT v.sentence_id, v.config_hash, v.view_id, v.status, v.text FROM views v "
                "JOIN _judged USING (sentence_id) WHERE list_contains(?, v.config_hash)",
                [list(self.earlier)],
            ).to_pylist()
        if len(rows) != len(sentence_ids) * len(self.earlier):
            raise RuntimeError(
                f"{len(sentence_ids) * len(self.earlier) - len(rows)} views of the augmenters listed before this "
                "one are missing: the near-duplicate check needs them first (run the recipe's augmenters in order)"
            )
        for row in rows:
            if row["status"] == "kept":
                found[row["sentence_id"]].append(
                    (self.earlier.index(row["config_hash"]), Reference(row["view_id"], row["text"]))
                )
        return {sid: tuple(ref for _, ref in sorted(refs, key=lambda pair: pair[0])) for sid, refs in found.items()}


def _recording(embed: Embed, pending: PendingEmbeddings) -> Embed:
    """`embed`, adding every text it is asked for to `pending` with its row: a text the lake
    stores already (each source, after the first augmenter's shard) is dropped at the write."""

    def recorded(texts: list[str]) -> np.ndarray:
        matrix = np.asarray(embed(texts))
        if matrix.ndim == 2 and len(matrix) == len(texts):  # else the judge names the bad shape
            pending.add(texts, matrix)
        return matrix

    return recorded
