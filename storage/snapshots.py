"""Named, immutable snapshots of view pairs: what a training run reads."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import xxhash
from viewmill.storage.ids import canonical_json, fingerprint
from viewmill.storage.lake import Lake, LakeError
from viewmill.storage.sandbox import refuse_output_in_lake
from viewmill.storage.schema import CORPUS_VERSIONS, SNAPSHOTS


@dataclass(frozen=True)
class Snapshot:
    name: str
    n_pairs: int
    content_hash: str
    lake_version: int
    created: bool  # False when an identical snapshot already existed


# What training reads of a pair (and its languages): the content hash covers exactly these.
HASHED_COLUMNS = ("pair_id", "sentence_id", "text_a", "text_b", "lang_a", "lang_b")
PAIRING_READS = ("corpus_versions", "corpus_members", "views")  # tables whose files pairing reads
HASH_BATCH = 65536  # rows per hashed block: part of the hash's definition, never change it


def pairs_content_hash(recipe: str, pairs: pa.Table) -> str:
    """Hash of the recipe and every pair's ids, texts and languages, in pair_id order: two
    snapshots with the same hash hand training the same bytes."""
    digest = xxhash.xxh3_128(canonical_json(recipe).encode("utf-8"))
    # One chunk first, so batch boundaries (and the hash) never depend on how the rows arrived.
    ordered = pairs.select(list(HASHED_COLUMNS)).sort_by("pair_id").combine_chunks()
    for batch in ordered.to_batches(max_chunksize=HASH_BATCH):
        digest.update(canonical_json([column.to_pylist() for column in batch.columns]).encode("utf-8"))
    return digest.hexdigest()


def legacy_content_hash(recipe: str, pairs: pa.Table) -> str:
    """The hash snapshots made before texts were hashed carry (ids only, in pairing order)."""
    ordered = pairs.sort_by([("sentence_id", "ascending"), ("view_b_id", "ascending")])
    return fingerprint(recipe, ordered["pair_id"].to_pylist())


def _candidate_pairs(lake: Lake, corpus_version: str, config_a: str, configs_b: list[str]) -> pa.Table:
    with lake.with_keys("_partners", pa.table({"config_hash": configs_b})):
        return lake.arrow(
            """
            SELECT a.sentence_id, a.view_id AS view_a_id, b.view_id AS view_b_id,
                   a.text AS text_a, b.text AS text_b, a.lang AS lang_a, b.lang AS lang_b
            FROM corpus_members s
            JOIN views a ON a.sentence_id = s.sentence_id AND a.config_hash = ? AND a.status = 'kept'
            JOIN views b ON b.sentence_id = s.sentence_id AND b.status = 'kept'
                        AND b.config_hash IN (SELECT config_hash FROM _partners)
            WHERE s.corpus_version = ?
            ORDER BY a.sentence_id, b.view_id
            """,
            [config_a, corpus_version],
        )


def create_pairs_snapshot(
    lake: Lake, *, recipe: str, corpus: str, corpus_version: str, config_a: str, configs_b: list[str], run_id: str
) -> Snapshot:
    """Pair augmenter a's kept view of every sentence of this corpus version (exactly the
    sentences the corpus holds now, see `record_corpus_version`) with each kept view of the
    augmenters in `configs_b`, as a named snapshot.

    The name is derived from the content (ids and texts), so the same pairs always give the
    same snapshot and an existing snapshot is never rewritten.
    """
    if not lake.scalar("SELECT count(*) FROM corpus_versions WHERE corpus_version = ?", [corpus_version]):
        raise LakeError(f"corpus version {corpus_version[:12]} of '{corpus}' is not in the lake: ingest it first")
    # What pairing reads must be what viewmill wrote: a changed file would be frozen into the snapshot.
    lake.require_intact(PAIRING_READS, f"pair the views of corpus '{corpus}'")
    pairs = _candidate_pairs(lake, corpus_version, config_a, configs_b)
    if pairs.num_rows == 0:
        raise LakeError(
            f"no sentence of corpus '{corpus}' has kept views from both augmenters: "
            'check the filters in the recipe (viewmill sql "SELECT augmenter, status, reject_reason, '
            'count(*) FROM views GROUP BY ALL")'
        )
    pairs = pairs.append_column("pair_id", _pair_ids(pairs))
    content_hash = pairs_content_hash(recipe, pairs)
    name = f"{recipe}-{content_hash[:12]}"
    existing = lake.arrow("SELECT n_pairs, lake_version FROM snapshots WHERE snapshot = ?", [name])
    if existing.num_rows:
        return Snapshot(name, existing["n_pairs"][0].as_py(), content_hash, existing["lake_version"][0].as_py(), False)
    n = pairs.num_rows
    record = {"snapshot": name, "recipe": recipe, "corpus": corpus, "content_hash": content_hash, "n_pairs": n,
              "run_id": run_id, "corpus_version": corpus_version}  # fmt: skip
    _write_snapshot(lake, pairs, record)
    return Snapshot(name, n, content_hash, lake.version(), True)


def _pair_ids(pairs: pa.Table) -> pa.Array:
    """Each pair's id: a hash of its sentence and its two views."""
    columns = (pairs[name].to_pylist() for name in ("sentence_id", "view_a_id", "view_b_id"))
    return pa.array([fingerprint(s, a, b) for s, a, b in zip(*columns, strict=True)], pa.string())


def _write_snapshot(lake: Lake, pairs: pa.Table, record: dict) -> None:
    """The pairs under the snapshot's name, and its `snapshots` row, in one transaction."""
    n = pairs.num_rows
    rows = pairs.append_column("recipe", pa.array([record["recipe"]] * n))
    rows = rows.append_column("snapshot", pa.array([record["snapshot"]] * n))
    with lake.transaction():
        lake.append("pairs", rows)
        row = {**record, "lake_version": lake.version() + 1, "created_at": datetime.now(UTC)}
        lake.append("snapshots", pa.Table.from_pylist([row], schema=SNAPSHOTS))


def record_corpus_version(lake: Lake, corpus: str, sentence_ids: list[str], run_id: str) -> str:
    """Record which sentences the corpus holds after this ingest; returns the version (a hash of
    the sorted ids). Sentences stay in `sentences` when a corpus shrinks, but a version lists
    only the current ones, so pairing a version never pairs a sentence the corpus lost."""
    ids = sorted(set(sentence_ids))
    version = fingerprint(corpus, ids)
    n = len(ids)
    with lake.transaction():
        members = pa.table({"corpus": [corpus] * n, "corpus_version": [version] * n, "sentence_id": ids})
        lake.append("corpus_members", members, unique_on=("corpus_version", "sentence_id"))
        row = {"corpus": corpus, "corpus_version": version, "n_sentences": n, "run_id": run_id,
               "created_at": datetime.now(UTC)}  # fmt: skip
        version_row = pa.Table.from_pylist([row], schema=CORPUS_VERSIONS)
        lake.append("corpus_versions", version_row, unique_on=("corpus_version",))
    return version


def _require_snapshot(lake: Lake, snapshot: str) -> None:
    if lake.scalar("SELECT count(*) FROM snapshots WHERE snapshot = ?", [snapshot]) == 0:
        known = [r[0] for r in lake.con.execute("SELECT snapshot FROM snapshots ORDER BY created_at").fetchall()]
        raise LakeError(f"no pairs snapshot named '{snapshot}' (known: {', '.join(known) or 'none'})")


EXPORT_FORMATS = {"parquet": "(FORMAT parquet, COMPRESSION zstd)", "jsonl": "(FORMAT json)"}


def export_snapshot(lake: Lake, snapshot: str, path: Path, fmt: str | None = None) -> int:
    """Write a snapshot's pairs to one Parquet or JSONL file (format from `fmt` or the suffix).

    DuckDB streams the rows to a temporary sibling that is renamed into place, so `path`
    is never half-written; a path inside the lake (or its catalog, however linked) is refused.
    Returns the number of pairs.
    """
    refuse_output_in_lake(path, lake.root, lake.catalog, lake.data_path)
    fmt = fmt or {".parquet": "parquet", ".jsonl": "jsonl", ".json": "jsonl"}.get(path.suffix)
    if fmt not in EXPORT_FORMATS:
        raise LakeError(f"cannot tell the export format of {path}: name it .parquet or .jsonl, or pass --format")
    _require_snapshot(lake, snapshot)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    query = (
        "SELECT pair_id, snapshot, recipe, sentence_id, text_a, text_b, lang_a, lang_b, view_a_id, view_b_id "
        f"FROM pairs WHERE snapshot = {_literal(snapshot)} ORDER BY pair_id"
    )
    try:
        lake.con.execute(f"COPY ({query}) TO {_literal(str(partial))} {EXPORT_FORMATS[fmt]}")
        partial.replace(path)
    finally:
        partial.unlink(missing_ok=True)
    return int(lake.scalar("SELECT n_pairs FROM snapshots WHERE snapshot = ?", [snapshot]))


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def snapshot_info(lake: Lake, snapshot: str) -> Snapshot:
    """A named snapshot as recorded (a clear error naming the known ones if absent)."""
    _require_snapshot(lake, snapshot)
    row = lake.arrow("SELECT * FROM snapshots WHERE snapshot = ?", [snapshot]).to_pylist()[0]
    return Snapshot(row["snapshot"], row["n_pairs"], row["content_hash"], row["lake_version"], created=False)


def read_pairs(lake: Lake, snapshot: str, purpose: str | None = None) -> pa.Table:
    """The pairs of a named snapshot, in a stable order; refused when a pairs file changed since
    viewmill wrote it (`purpose` says what the refusal stopped)."""
    _require_snapshot(lake, snapshot)
    lake.require_intact(("pairs",), purpose or f"read pairs snapshot '{snapshot}'")
    return lake.arrow(
        "SELECT pair_id, sentence_id, text_a, text_b FROM pairs WHERE snapshot = ? ORDER BY pair_id", [snapshot]
    )
