"""Named, immutable snapshots of view pairs: what a training run reads."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from viewmill.storage.catalog import unknown_snapshot
from viewmill.storage.files import build_dir_atomically
from viewmill.storage.ids import canonical_json
from viewmill.storage.lake import Lake, LakeError
from viewmill.storage.negatives import (
    NLI_SOURCE,
    NegativesSource,
    complete_pairs,
    negatives_lists_sql,
    snapshot_negatives,
)
from viewmill.storage.output_paths import OutputGuard
from viewmill.storage.pair_hashes import PAIR_ID_PARTS, pair_ids, pairs_content_hash
from viewmill.storage.schema import SNAPSHOTS


@dataclass(frozen=True)
class Snapshot:
    name: str
    n_pairs: int
    content_hash: str
    lake_version: int
    created: bool  # False when an identical snapshot already existed


PAIRING_READS = ("corpus_versions", "corpus_members", "views")  # tables whose files pairing reads


def _candidate_pairs(lake: Lake, corpus_version: str, pairings: Sequence[tuple[str, str]]) -> pa.Table:
    """Every pairing's (a, b) kept views of each sentence of the corpus version, in no set order
    (one plain join per pairing: a join against a table of pairings cost a third more)."""
    parts = [
        lake.arrow(
            """
            SELECT a.sentence_id, a.view_id AS view_a_id, b.view_id AS view_b_id,
                   a.text AS text_a, b.text AS text_b, a.lang AS lang_a, b.lang AS lang_b,
                   a.config_hash AS config_a, b.config_hash AS config_b
            FROM corpus_members s
            JOIN views a ON a.sentence_id = s.sentence_id AND a.status = 'kept'
            JOIN views b ON b.sentence_id = s.sentence_id AND b.status = 'kept'
            WHERE s.corpus_version = ? AND a.config_hash = ? AND b.config_hash = ?
            """,
            [corpus_version, config_a, config_b],
        )
        for config_a, config_b in dict.fromkeys(pairings)
    ]
    return pa.concat_tables(parts)


def create_pairs_snapshot(
    lake: Lake,
    *,
    recipe: str,
    corpus: str,
    corpus_version: str,
    pairings: Sequence[tuple[str, str]],
    run_id: str,
    negatives: NegativesSource | None = None,
    negative_pairings: Sequence[tuple[str, str]] | None = None,
    keep_identical: bool = False,
) -> Snapshot:
    """For each (a, b) view configuration pairing, pair a's kept view of every sentence of this
    corpus version (exactly the sentences the corpus holds now, see `record_corpus_version`)
    with b's kept views, all in one named snapshot; with `negatives`, each pair also gets
    `negatives.per_anchor` hard negatives (a pair with fewer is dropped, and counted), or only
    the pairs of `negative_pairings` (some of `pairings`; the others get none). A pair
    whose two texts are identical (both round trips came back the same) is dropped and counted
    too, unless `keep_identical`: it contrasts nothing for BSL and is a false positive for
    contrastive objectives.

    The name is derived from the content (ids and texts, and the negatives), so the same pairs
    always give the same snapshot and an existing snapshot is never rewritten.
    """
    pairs = _checked_pairs(lake, corpus, corpus_version, pairings, negatives)
    pairs, identical = _kept_by_pair_id(pairs, keep_identical)
    takers = None if negative_pairings is None else _of_pairings(pairs, negative_pairings)
    pairs = pairs.drop_columns(["config_a", "config_b"])
    record = {"recipe": recipe, "corpus": corpus, "run_id": run_id, "corpus_version": corpus_version}
    record["identical_dropped"] = identical
    rows = None
    if negatives is None:
        content_hash = pairs_content_hash(recipe, pairs)
    else:
        key = negatives.reuse_key()
        plain_hash = pairs_content_hash(recipe, pairs)
        reused = _reusable_snapshot(lake, record, plain_hash, key)
        if reused is not None:
            return reused
        pairs, rows, info = _with_negatives(lake, pairs, negatives, corpus_version, takers)
        record["negatives"] = canonical_json({**info, "pairs_hash": plain_hash, "reuse_key": key})
        content_hash = pairs_content_hash(recipe, pairs, rows)
    name = f"{recipe}-{content_hash[:12]}"
    existing = lake.arrow("SELECT n_pairs, lake_version FROM snapshots WHERE snapshot = ?", [name])
    if existing.num_rows:
        return Snapshot(name, existing["n_pairs"][0].as_py(), content_hash, existing["lake_version"][0].as_py(), False)
    n = pairs.num_rows
    record.update(snapshot=name, content_hash=content_hash, n_pairs=n)
    _write_snapshot(lake, pairs, record, rows)
    return Snapshot(name, n, content_hash, lake.version(), True)


def _kept_by_pair_id(pairs: pa.Table, keep_identical: bool) -> tuple[pa.Table, int]:
    """The pairs to snapshot with their pair_id, in pair_id order, and how many were dropped for
    identical texts (none with `keep_identical`). Pair_id order is the one everything downstream
    sees: mining's input, the content hash's (which then need not sort), and the files' (every
    reader orders by pair_id, and DuckDB sorts rows already in order 1.5x faster: verify,
    training's load). One take of the whole table: filtering and then sorting it copied the texts
    twice. Arrow sorts: an ORDER BY in DuckDB raised the stage's peak RSS at 1M sentences from
    1.32 to 1.62 GiB (eighth session)."""
    ids_of = pairs.select(list(PAIR_ID_PARTS))
    kept = None
    if not keep_identical:
        kept = pc.indices_nonzero(pc.not_equal(pairs["text_a"], pairs["text_b"]))
        if len(kept) == 0:
            raise LakeError(
                f"all {pairs.num_rows} pairs have identical texts (the views equal each other): pair views that "
                "differ, or set pair.keep_identical: true"
            )
        ids_of = ids_of.take(kept)
    ids = pair_ids(ids_of)
    order = pc.sort_indices(ids)
    rows = order if kept is None else kept.take(order)
    return pairs.take(rows).append_column("pair_id", ids.take(order)), pairs.num_rows - len(ids)


def _checked_pairs(
    lake: Lake,
    corpus: str,
    corpus_version: str,
    pairings: Sequence[tuple[str, str]],
    negatives: NegativesSource | None,
) -> pa.Table:
    """The candidate pairs of this corpus version, once the version and every file pairing
    reads are checked; refused when there are none."""
    if not lake.scalar("SELECT count(*) FROM corpus_versions WHERE corpus_version = ?", [corpus_version]):
        raise LakeError(f"corpus version {corpus_version[:12]} of '{corpus}' is not in the lake: ingest it first")
    # What pairing reads must be what viewmill wrote: a changed file would be frozen into the snapshot.
    reads = PAIRING_READS + (negatives.reads() if negatives is not None else ())
    lake.require_intact(reads, f"pair the views of corpus '{corpus}'")
    pairs = _candidate_pairs(lake, corpus_version, pairings)
    if pairs.num_rows == 0:
        raise LakeError(
            f"no sentence of corpus '{corpus}' has kept views from both augmenters: "
            'check the filters in the recipe (viewmill sql "SELECT augmenter, status, reject_reason, '
            'count(*) FROM views GROUP BY ALL")'
        )
    return pairs


def _reusable_snapshot(lake: Lake, record: dict, pairs_hash: str, key: dict | None) -> Snapshot | None:
    """An earlier snapshot of these pairs whose negatives an equal `key` decided (so costly
    negatives are not computed again to learn a name that exists)."""
    if key is None:
        return None
    rows = lake.arrow(
        "SELECT * FROM snapshots WHERE recipe = ? AND corpus_version = ? ORDER BY created_at",
        [record["recipe"], record["corpus_version"]],
    ).to_pylist()
    for row in rows:
        info = json.loads(row.get("negatives") or "null")
        if info and info["pairs_hash"] == pairs_hash and canonical_json(info["reuse_key"]) == canonical_json(key):
            return Snapshot(row["snapshot"], row["n_pairs"], row["content_hash"], row["lake_version"], False)
    return None


NO_NEGATIVES_HINT = {
    NLI_SOURCE: 'check the NLI labels (viewmill sql "SELECT label, count(*) FROM nli_pairs GROUP BY ALL")',
}


def _of_pairings(pairs: pa.Table, pairings: Sequence[tuple[str, str]]) -> pa.Array:
    """Which pairs come from one of `pairings` (view configuration pairs)."""
    chosen = pc.binary_join_element_wise(pairs["config_a"], pairs["config_b"], "/")
    return pc.is_in(chosen, value_set=pa.array([f"{a}/{b}" for a, b in pairings], pa.string())).combine_chunks()


def _with_negatives(
    lake: Lake, pairs: pa.Table, source: NegativesSource, corpus_version: str, takers: pa.Array | None = None
) -> tuple[pa.Table, pa.Table, dict]:
    """The pairs that got `per_anchor` negatives (with `takers`, the pairs that take them; the
    others are kept without), those negatives, and the snapshot's note of them."""
    asking = pairs if takers is None else pairs.filter(takers)
    found = source.negatives(lake, asking.select(["pair_id", "sentence_id", "text_a", "text_b"]), corpus_version)
    kept, rows, dropped = complete_pairs(asking, found, source.per_anchor)
    if kept.num_rows == 0:
        hint = NO_NEGATIVES_HINT.get(source.source, "widen range_max, or relax max_score and the margins")
        raise LakeError(
            f"none of the {asking.num_rows} pairs got {source.per_anchor} {source.source} negative(s): lower "
            f"pair.negatives.per_anchor, or {hint}"
        )
    note = {"source": source.source, "per_anchor": source.per_anchor, "dropped": dropped}
    if takers is None:
        return kept, rows, note
    # The pairs of the other pairings stay, with no negatives; the note says how many have them.
    held = pc.is_in(pairs["pair_id"], value_set=kept["pair_id"])
    note.update(pairings=[list(p) for p in source.pairings or []], with_negatives=kept.num_rows)
    return pairs.filter(pc.or_(pc.invert(takers), held)), rows, note


def _write_snapshot(lake: Lake, pairs: pa.Table, record: dict, negatives: pa.Table | None) -> None:
    """The pairs (and negatives) under the snapshot's name, and its `snapshots` row, in one transaction."""
    n = pairs.num_rows
    rows = pairs.append_column("recipe", pa.array([record["recipe"]] * n))
    rows = rows.append_column("snapshot", pa.array([record["snapshot"]] * n))
    with lake.transaction():
        lake.append("pairs", rows)
        if negatives is not None:
            named = negatives.append_column("snapshot", pa.array([record["snapshot"]] * negatives.num_rows))
            lake.append("pair_negatives", named)
        row = {**record, "lake_version": lake.version() + 1, "created_at": datetime.now(UTC)}
        lake.append("snapshots", pa.Table.from_pylist([row], schema=SNAPSHOTS))


def _require_snapshot(lake: Lake, snapshot: str) -> dict[str, Any]:
    """The snapshot's `snapshots` row (a clear error naming the known ones if absent)."""
    rows = lake.arrow("SELECT * FROM snapshots WHERE snapshot = ?", [snapshot]).to_pylist()
    if not rows:
        raise unknown_snapshot(snapshot, snapshot_names(lake))
    return rows[0]


def snapshot_names(lake: Lake) -> list[str]:
    """The lake's pairs snapshots, oldest first."""
    return [r[0] for r in lake.con.execute("SELECT snapshot FROM snapshots ORDER BY created_at").fetchall()]


def _per_anchor(record: dict[str, Any]) -> int:
    """Negatives per pair of a snapshot (0: none). A lake made before negatives has no such column."""
    note = record.get("negatives")
    return int(json.loads(note)["per_anchor"]) if note else 0


EXPORT_FORMATS = {"parquet": "(FORMAT parquet, COMPRESSION zstd)", "jsonl": "(FORMAT json)"}
HF_FORMAT = "hf"  # a Hugging Face `datasets` folder (Dataset.save_to_disk)
LAYOUTS = ("viewmill", "sentence-transformers")
VIEWMILL_COLUMNS = "pair_id, snapshot, recipe, sentence_id, text_a, text_b, lang_a, lang_b, view_a_id, view_b_id"


def export_snapshot(lake: Lake, snapshot: str, path: Path, fmt: str | None = None, layout: str = "viewmill") -> int:
    """Write a snapshot's pairs to one Parquet or JSONL file, or a Hugging Face `datasets`
    folder (`fmt` "hf"); the format comes from `fmt` or the suffix.

    `layout` "viewmill": the lake's pair columns (plus `negatives`, a list, when the snapshot
    has them: empty for a pair without); "sentence-transformers": anchor, positive, then negative (one per pair) or
    negative_1..negative_k, what its trainer and losses take. The file or folder appears whole
    (written aside, then renamed); a path inside the lake (or its catalog, however linked) is
    refused. Returns the number of pairs.
    """
    guard = OutputGuard.of(lake)
    fmt = fmt or {".parquet": "parquet", ".jsonl": "jsonl", ".json": "jsonl"}.get(path.suffix)
    guard.check(path, replaces_folder=fmt == HF_FORMAT)
    if fmt not in (*EXPORT_FORMATS, HF_FORMAT):
        raise LakeError(
            f"cannot tell the export format of {path}: name it .parquet or .jsonl, or pass --format "
            f"(parquet, jsonl, or {HF_FORMAT} for a Hugging Face datasets folder)"
        )
    if layout not in LAYOUTS:
        raise LakeError(f"unknown export layout '{layout}': use {' or '.join(LAYOUTS)}")
    record = _require_snapshot(lake, snapshot)
    holding = _holding(record) if _per_anchor(record) else 0
    if layout != "viewmill" and holding and holding != record["n_pairs"]:
        raise LakeError(
            f"pairs snapshot '{snapshot}' gives negatives to {holding} of its {record['n_pairs']} pairs: "
            "the sentence-transformers layout needs them on every pair; export --layout viewmill"
        )
    query = _export_query(snapshot, _per_anchor(record), layout)
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == HF_FORMAT:
        _save_dataset(lake, query, path)
        return int(record["n_pairs"])
    with guard.atomic(path) as partial:
        lake.con.execute(f"COPY ({query}) TO {_literal(str(partial))} {EXPORT_FORMATS[fmt]}")
    return int(record["n_pairs"])


def _export_query(snapshot: str, per_anchor: int, layout: str) -> str:
    """The pairs of one snapshot, in pair_id order, in `layout`'s columns."""
    if layout == "viewmill":
        columns = ", ".join(f"p.{name}" for name in VIEWMILL_COLUMNS.split(", "))
        columns += ", coalesce(n.negatives, []) AS negatives" if per_anchor else ""
    else:
        names = ["negative"] if per_anchor == 1 else [f"negative_{i}" for i in range(1, per_anchor + 1)]
        negatives = "".join(f", n.negatives[{i}] AS {name}" for i, name in enumerate(names, start=1))
        columns = f"p.text_a AS anchor, p.text_b AS positive{negatives if per_anchor else ''}"
    # LEFT: the pairs of a snapshot that gives negatives to some keep an empty list.
    joined = f"LEFT JOIN {negatives_lists_sql(_literal(snapshot))} n USING (pair_id)" if per_anchor else ""
    return f"SELECT {columns} FROM pairs p {joined} WHERE p.snapshot = {_literal(snapshot)} ORDER BY p.pair_id"


def _save_dataset(lake: Lake, query: str, path: Path) -> None:
    """The query's rows as a Hugging Face `datasets` folder (Dataset.load_from_disk reads it)."""
    from datasets import Dataset
    from datasets.table import InMemoryTable

    if path.exists() and not path.is_dir():
        raise LakeError(f"{path} is a file: --format {HF_FORMAT} writes a folder, name one")
    table = lake.arrow(query)
    build_dir_atomically(path, lambda staging: Dataset(InMemoryTable(table)).save_to_disk(str(staging)), replace=True)


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def snapshot_info(lake: Lake, snapshot: str) -> Snapshot:
    """A named snapshot as recorded (a clear error naming the known ones if absent)."""
    row = _require_snapshot(lake, snapshot)
    return Snapshot(row["snapshot"], row["n_pairs"], row["content_hash"], row["lake_version"], created=False)


def snapshot_tables(lake: Lake, snapshot: str) -> tuple[str, ...]:
    """The tables a snapshot's rows are in: `pairs`, and `pair_negatives` when it has negatives."""
    return _tables(_per_anchor(_require_snapshot(lake, snapshot)))


def _tables(per_anchor: int) -> tuple[str, ...]:
    return ("pairs", "pair_negatives") if per_anchor else ("pairs",)


def stored_negatives(lake: Lake, snapshot: str) -> pa.Table | None:
    """The `pair_negatives` rows of a snapshot that has negatives (what its content hash
    covers beside the pairs); None for a snapshot without."""
    return snapshot_negatives(lake, snapshot) if _per_anchor(_require_snapshot(lake, snapshot)) else None


def read_pairs(lake: Lake, snapshot: str, purpose: str | None = None) -> pa.Table:
    """The pairs of a named snapshot, in a stable order (pair_id, sentence_id, text_a, text_b,
    and for a snapshot with hard negatives `negatives`: their texts by rank, exactly
    per_anchor per pair, or none for the pairs of pairings it gave none); refused when a
    pairs or negatives file changed since viewmill wrote
    it (`purpose` says what the refusal stopped)."""
    record = _require_snapshot(lake, snapshot)
    per_anchor = _per_anchor(record)
    lake.require_intact(_tables(per_anchor), purpose or f"read pairs snapshot '{snapshot}'")
    if not per_anchor:
        sql = "SELECT pair_id, sentence_id, text_a, text_b FROM pairs WHERE snapshot = ? ORDER BY pair_id"
        return lake.arrow(sql, [snapshot])
    table = lake.arrow(
        f"SELECT p.pair_id, p.sentence_id, p.text_a, p.text_b, coalesce(n.negatives, []) AS negatives FROM pairs p "
        f"LEFT JOIN {negatives_lists_sql()} n USING (pair_id) WHERE p.snapshot = ? ORDER BY p.pair_id",
        [snapshot, snapshot],
    )
    lengths = pc.list_value_length(table["negatives"])
    holding = pc.sum(pc.greater(lengths, 0)).as_py() or 0
    uneven = pc.any(pc.and_(pc.greater(lengths, 0), pc.not_equal(lengths, per_anchor))).as_py()
    expected, n = _holding(record), record["n_pairs"]
    if table.num_rows != n or holding != expected or uneven:
        which = f"{n} pairs" if expected == n else f"{n} pairs, {expected}"
        raise LakeError(
            f"pairs snapshot '{snapshot}' has {which} with {per_anchor} negative(s) each, but the lake's rows "
            "differ: run `viewmill lake verify`, then `viewmill lake repair`"
        )
    return table.set_column(4, "negatives", table["negatives"].cast(pa.list_(pa.string())))


def _holding(record: dict[str, Any]) -> int:
    """How many of a snapshot's pairs have negatives: every pair, unless its
    `pair.negatives.pairings` gave them to some (the note's `with_negatives`)."""
    return int(json.loads(record["negatives"]).get("with_negatives", record["n_pairs"]))
