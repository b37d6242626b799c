"""A recipe's `corpus:`, `pair:` and `execution:` sections: what is read, which views are
paired, and how augmentation is cut into tasks."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, field_validator, model_serializer, model_validator
from viewmill.augment.ingest.readers import READERS, ReadOptions
from viewmill.storage.negatives import NliContradictions
from viewmill.train.mining import MinedNegatives

from viewmill.specs import Spec

MAX_SENTENCE_WORDS = 10_000  # corpus.min_words / max_words: far above any sentence
MAX_CORPUS_SENTENCES = 10**12


class CorpusSpec(Spec):
    name: str | None = Field(None, description="defaults to the recipe's name")
    format: str = Field(
        "text",
        description="a registered corpus format: text, book, senteval, nli-jsonl, csv, parquet, hf or a plugin's",
    )
    files: list[Path] = Field(min_length=1, description="files; for hf, hub ids or save_to_disk directories")
    lang: str = "en"
    text_column: str | None = Field(None, description="csv, parquet and hf: the column with the text")
    split: str = Field("train", description="hf: the dataset split")
    config: str | None = Field(None, description="hf: the dataset configuration")
    detokenize: bool = False
    min_words: int = Field(3, ge=1, le=MAX_SENTENCE_WORDS)
    max_words: int = Field(64, ge=1, le=MAX_SENTENCE_WORDS)
    limit: int | None = Field(None, ge=1, le=MAX_CORPUS_SENTENCES)
    on_error: Literal["stop", "skip"] = Field("stop", description="a malformed record stops the run, or is counted")

    @field_validator("format")
    @classmethod
    def _registered_format(cls, fmt: str) -> str:
        if fmt not in READERS:
            raise ValueError(READERS.unknown(fmt))
        return fmt

    @model_validator(mode="after")
    def _column_where_needed(self) -> CorpusSpec:
        if READERS[self.format].needs_text_column and not self.text_column:
            raise ValueError(f"format {self.format} needs text_column: the name of the column with the text")
        return self

    def read_options(self) -> ReadOptions:
        return ReadOptions(lang=self.lang, text_column=self.text_column, split=self.split, config=self.config)


class PairSpec(Spec):
    """Which views of a sentence are paired: view_a with view_b (a list pairs view_a with each
    of them: an English sentence with each of its forward translations), or `pairings`, a
    list of [a, b] augmenter pairs taken together (English with each translation and the
    translations with each other). `negatives` gives each pair hard negatives: a premise's
    NLI contradictions, or texts an encoder mines (only the pairs of `negatives.pairings`,
    when it names some)."""

    view_a: str | None = None
    view_b: str | list[str] | None = None
    pairings: list[tuple[str, str]] | None = Field(
        None,
        min_length=1,
        description="instead of view_a/view_b: [a, b] augmenter pairs, e.g. [[en, fwd_pt], [fwd_pt, fwd_es]]",
    )
    negatives: Annotated[NliContradictions | MinedNegatives, Field(discriminator="source")] | None = None
    keep_identical: bool | None = Field(
        None,
        description="keep pairs whose two texts are identical (dropped and counted by default: they teach nothing)",
    )

    @model_validator(mode="after")
    def _one_form(self) -> PairSpec:
        if self.pairings is not None and (self.view_a is not None or self.view_b is not None):
            raise ValueError("give pair.pairings or pair.view_a with pair.view_b, not both")
        if self.pairings is None and (self.view_a is None or self.view_b is None):
            raise ValueError("pair needs view_a and view_b (or pairings: a list of [a, b] augmenter pairs)")
        if len(set(self.pairs)) != len(self.pairs):
            raise ValueError(f"pair lists a pairing twice: {[list(p) for p in self.pairs]}")
        self._negatives_pairings_known()
        return self

    def _negatives_pairings_known(self) -> None:
        chosen = [tuple(p) for p in (self.negatives.pairings or [])] if self.negatives is not None else []
        for pairing in chosen:
            if pairing not in self.pairs:
                raise ValueError(
                    f"pair.negatives.pairings names {list(pairing)}, which is not one of the pair's pairings "
                    f"{[list(p) for p in self.pairs]}: name one of those"
                )
        if len(set(chosen)) != len(chosen):
            raise ValueError(f"pair.negatives.pairings lists a pairing twice: {[list(p) for p in chosen]}")

    @model_serializer(mode="wrap")
    def _without_unset_fields(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Recipe hashes from before `negatives` and `pairings` existed stay valid.
        return {key: value for key, value in handler(self).items() if value is not None}

    @property
    def pairs(self) -> list[tuple[str, str]]:
        """Every (a, b) augmenter pairing, in the recipe's order."""
        if self.pairings is not None:
            return [tuple(pairing) for pairing in self.pairings]
        partners = [self.view_b] if isinstance(self.view_b, str) else list(self.view_b or [])
        return [(str(self.view_a), b) for b in partners]


class ExecutionSpec(Spec):
    """How augmentation is cut into tasks. Not part of what the views are, except the chunk of
    views that depend on their batch (a neural engine's, the meaning filter's): its size enters
    their configuration hash."""

    shard_sentences: int = Field(
        5000, ge=1, le=MAX_CORPUS_SENTENCES, description="sentences per augmentation shard (the unit of retry)"
    )
    chunk_sentences: int | None = Field(
        None,
        ge=1,
        le=10_000_000,
        description="sentences per commit inside a shard (what a kill can lose); unset: about a second of work "
        "per commit, at least 512 and at most 65,536 sentences, or where views depend on their batch a fixed "
        "512 (2,048 with the meaning filter, 4,096 on a GPU)",
    )
    retries: int = Field(3, ge=0, le=100, description="Prefect retries of a failed shard task")
    retry_delay_s: float = Field(
        10.0, ge=0, le=86_400, description="first retry delay (at most a day); doubles for each further retry"
    )


MAX_SOUP_RECIPES = 16  # each one trains a model


class SoupSpec(Spec):
    """Average this recipe's model with the models of other recipes over the same start (a
    model soup): each share of this recipe's model is a candidate mix, the rest split evenly
    among the others, and the recipe's dev tasks and selection rule choose the mix (this recipe's
    model alone included). The other recipes run first where their models are not in the lake."""

    recipes: list[str | dict[str, Any]] = Field(
        min_length=1,
        max_length=MAX_SOUP_RECIPES,
        description="recipe files (from this recipe's folder) whose trained models go into the soup",
    )
    shares: list[float] = Field(
        [0.5], min_length=1, max_length=32, description="this recipe's model's candidate shares of the average, 0-1"
    )

    @field_validator("shares")
    @classmethod
    def _distinct(cls, shares: list[float]) -> list[float]:
        outside = [share for share in shares if not 0 <= share <= 1]
        if outside:
            raise ValueError(f"soup.shares must lie between 0 and 1, got {outside[0]}")
        if len(set(shares)) != len(shares):
            raise ValueError(f"soup.shares lists a share twice: {shares}")
        return shares
