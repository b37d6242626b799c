"""Hard negatives of a pairs snapshot: where they come from (the `NegativesSource` a recipe's
`pair.negatives` names), NLI contradictions as negatives, and the `pair_negatives` rows a
snapshot writes with its pairs. Mining them with an encoder is `viewmill.train.mining`."""

from __future__ import annotations

from typing import Any, Literal, Protocol

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field, SerializerFunctionWrapHandler, model_serializer
from viewmill.storage.ids import canonical_json
from viewmill.storage.lake import Lake

from viewmill.specs import Seed, Spec

NLI_SOURCE = "nli-contradiction"
MINED_SOURCE = "mined"
# The rows a source returns, and what a snapshot's content hash covers of them.
NEGATIVE_COLUMNS = ("pair_id", "rank", "sentence_id", "text", "source", "miner", "score")
ROWS = pa.schema(
    [("pair_id", pa.string()), ("rank", pa.int32()), ("sentence_id", pa.string()), ("text", pa.string()),
     ("source", pa.string()), ("miner", pa.string()), ("score", pa.float64())]
)  # fmt: skip


class NegativesSource(Protocol):
    """What a snapshot takes its hard negatives from (a recipe's `pair.negatives`)."""

    source: str
    per_anchor: int
    pairings: list[tuple[str, str]] | None  # the pairings whose pairs get negatives; None: every one

    def reads(self) -> tuple[str, ...]:
        """Lake tables it reads, checked against their recorded hashes first."""
        ...

    def reuse_key(self) -> dict | None:
        """What decides the negatives, when computing them is costly (mining): a snapshot of the
        same pairs made with an equal key is reused without computing them. None: always computed."""
        ...

    def negatives(self, lake: Lake, pairs: pa.Table, corpus_version: str) -> pa.Table:
        """Rows of `ROWS` for `pairs` (pair_id, sentence_id, text_a, text_b): at most
        `per_anchor` per pair, ranked from 1; a pair may get fewer (it is then dropped)."""
        ...


class NegativesSpec(Spec):
    """What every `pair.negatives` source has: which of `pair.pairings` get negatives."""

    pairings: list[tuple[str, str]] | None = Field(
        None,
        min_length=1,
        description="[a, b] pairings of pair.pairings whose pairs get negatives (the others carry none); "
        "unset: every pairing",
    )

    @model_serializer(mode="wrap")
    def _without_unset_pairings(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Recipe hashes from before `pairings` existed stay valid.
        dumped = handler(self)
        if dumped.get("pairings") is None:
            dumped.pop("pairings", None)
        return dumped


class NliContradictions(NegativesSpec):
    """A premise's contradicting hypotheses (labelled NLI data, the lake's `nli_pairs`) as the
    negatives of its pairs: SimCSE's supervised triplets (premise, entailed, contradicted)."""

    source: Literal["nli-contradiction"]
    per_anchor: int = Field(1, ge=1, le=1000, description="negatives per pair; pairs with fewer are dropped")
    labels: list[str] = Field(["contradiction"], min_length=1, description="gold labels that count as a negative")
    seed: Seed = Field(0, description="picks per_anchor hypotheses when a premise has more")

    def reads(self) -> tuple[str, ...]:
        return ("nli_pairs",)

    def reuse_key(self) -> dict | None:
        return None  # one join: cheaper than telling whether the NLI links changed

    def miner(self) -> dict:
        return {"labels": self.labels, "seed": self.seed}

    def negatives(self, lake: Lake, pairs: pa.Table, corpus_version: str) -> pa.Table:
        marks = ", ".join("?" for _ in self.labels)
        keys = pairs.select(["pair_id", "sentence_id", "text_a", "text_b"])
        with lake.with_keys("_anchors", keys):
            # md5 of (seed, pair, hypothesis): a seeded choice among many that DuckDB's version never changes.
            table = lake.arrow(
                f"""
                WITH found AS (
                    SELECT DISTINCT p.pair_id, n.hypothesis_id AS sentence_id, n.hypothesis_text AS text
                    FROM _anchors p JOIN nli_pairs n ON n.premise_id = p.sentence_id
                    WHERE n.label IN ({marks}) AND n.hypothesis_id <> n.premise_id
                      AND n.hypothesis_text NOT IN (p.text_a, p.text_b))
                SELECT pair_id, CAST(row_number() OVER (PARTITION BY pair_id
                           ORDER BY md5(concat(?, ':', pair_id, ':', sentence_id))) AS INTEGER) AS rank,
                       sentence_id, text
                FROM found QUALIFY rank <= ? ORDER BY pair_id, rank
                """,
                [*self.labels, str(self.seed), self.per_anchor],
            )
        n = table.num_rows
        table = table.append_column("source", pa.array([NLI_SOURCE] * n, pa.string()))
        table = table.append_column("miner", pa.array([canonical_json(self.miner())] * n, pa.string()))
        return table.append_column("score", pa.nulls(n, pa.float64())).cast(ROWS)


def complete_pairs(pairs: pa.Table, negatives: pa.Table, per_anchor: int) -> tuple[pa.Table, pa.Table, int]:
    """The pairs that have `per_anchor` negatives (ranks 1..per_anchor; the other pairs are
    dropped), those negatives, and how many pairs were dropped."""
    negatives = negatives.filter(pc.less_equal(negatives["rank"], per_anchor))
    counts = negatives.group_by("pair_id").aggregate([("rank", "count_distinct")])
    full = counts.filter(pc.equal(counts["rank_count_distinct"], per_anchor))["pair_id"]
    kept = pairs.filter(pc.is_in(pairs["pair_id"], value_set=full))
    rows = negatives.filter(pc.is_in(negatives["pair_id"], value_set=full))
    return kept, rows, pairs.num_rows - kept.num_rows


def candidate_sentences(lake: Lake, pairs: pa.Table, corpus_version: str, kind: str) -> pa.Table:
    """The texts mining may choose negatives from, one row per distinct text (sentence_id,
    text), in a stable order: the pairs' positives (`positives`, as sentence-transformers
    mines), or every sentence of the corpus version (`sentences`)."""
    if kind == "positives":
        with lake.with_keys("_positives", pairs.select(["sentence_id", "text_b"])):
            sql = "SELECT min(sentence_id) AS sentence_id, text_b AS text FROM _positives GROUP BY text_b"
            return lake.arrow(f"{sql} ORDER BY sentence_id, text")
    if kind == "sentences":
        return lake.arrow(
            """
            SELECT min(s.sentence_id) AS sentence_id, s.text FROM corpus_members m
            JOIN sentences s ON s.sentence_id = m.sentence_id WHERE m.corpus_version = ?
            GROUP BY s.text ORDER BY sentence_id, s.text
            """,
            [corpus_version],
        )
    raise ValueError(f"unknown negative candidates '{kind}': use positives or sentences")


def snapshot_negatives(lake: Lake, snapshot: str) -> pa.Table:
    """A snapshot's `pair_negatives` rows (NEGATIVE_COLUMNS), by pair and rank."""
    columns = ", ".join(NEGATIVE_COLUMNS)
    sql = f"SELECT {columns} FROM pair_negatives WHERE snapshot = ? ORDER BY pair_id, rank"
    return lake.arrow(sql, [snapshot]).cast(ROWS)


def negatives_lists_sql(snapshot_param: str = "?") -> str:
    """A subquery: each pair of one snapshot with its negatives' texts (`negatives`, by rank)."""
    return (
        "(SELECT pair_id, list(text ORDER BY rank) AS negatives FROM pair_negatives "
        f"WHERE snapshot = {snapshot_param} GROUP BY pair_id)"
    )
