"""Named, immutable snapshots of view pairs: what a training run reads."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
from viewmill.storage.ids import fingerprint
from viewmill.storage.lake import Lake, LakeError
from viewmill.storage.schema import SNAPSHOTS


@dataclass(frozen=True)
class Snapshot:
    name: str
    n_pairs: int
    content_hash: str
    lake_version: int
    created: bool  # False when an identical snapshot already existed


def _candidate_pairs(lake: Lake, corpus: str, config_a: str, configs_b: list[str]) -> pa.Table:
    with lake.with_keys("_partners", pa.table({"config_hash": configs_b})):
        return lake.arrow(
            """
            SELECT a.sentence_id, a.view_id AS view_a_id, b.view_id AS view_b_id,
                   a.text AS text_a, b.text AS text_b, a.lang AS lang_a, b.lang AS lang_b
            FROM sentences s
            JOIN views a ON a.sentence_id = s.sentence_id AND a.config_hash = ? AND a.status = 'kept'
            JOIN views b ON b.sentence_id = s.sentence_id AND b.status = 'kept'
                        AND b.config_hash IN (SELECT config_hash FROM _partners)
            WHERE s.corpus = ?
            ORDER BY a.sentence_id, b.view_id
            """,
            [config_a, corpus],
        )


def create_pairs_snapshot(
    lake: Lake, *, recipe: str, corpus: str, config_a: str, configs_b: list[str], run_id: str
) -> Snapshot:
    """Pair augmenter a's kept view of every corpus sentence with each kept view of the
    augmenters in `configs_b`, as a named snapshot.

    The name is derived from the content, so the same pairs always give the same snapshot
    and an existing snapshot is never rewritten.
    """
    pairs = _candidate_pairs(lake, corpus, config_a, configs_b)
    if pairs.num_rows == 0:
        raise LakeError(
            f"no sentence of corpus '{corpus}' has kept views from both augmenters: "
            'check the filters in the recipe (viewmill sql "SELECT augmenter, status, reject_reason, '
            'count(*) FROM views GROUP BY ALL")'
        )
    pair_ids = [
        fingerprint(s, a, b)
        for s, a, b in zip(
            pairs["sentence_id"].to_pylist(),
            pairs["view_a_id"].to_pylist(),
            pairs["view_b_id"].to_pylist(),
            strict=True,
        )
    ]
    content_hash = fingerprint(recipe, pair_ids)
    name = f"{recipe}-{content_hash[:12]}"
    existing = lake.arrow("SELECT n_pairs, lake_version FROM snapshots WHERE snapshot = ?", [name])
    if existing.num_rows:
        return Snapshot(name, existing["n_pairs"][0].as_py(), content_hash, existing["lake_version"][0].as_py(), False)
    n = pairs.num_rows
    rows = (
        pairs.append_column("pair_id", pa.array(pair_ids))
        .append_column("recipe", pa.array([recipe] * n))
        .append_column("snapshot", pa.array([name] * n))
    )
    with lake.transaction():
        lake.append("pairs", rows)
        lake.append(
            "snapshots",
            pa.Table.from_pylist(
                [
                    {
                        "snapshot": name,
                        "recipe": recipe,
                        "corpus": corpus,
                        "content_hash": content_hash,
                        "n_pairs": n,
                        "lake_version": lake.version() + 1,
                        "run_id": run_id,
                        "created_at": datetime.now(UTC),
                    }
                ],
                schema=SNAPSHOTS,
            ),
        )
    return Snapshot(name, n, content_hash, lake.version(), True)


def _require_snapshot(lake: Lake, snapshot: str) -> None:
    if lake.scalar("SELECT count(*) FROM snapshots WHERE snapshot = ?", [snapshot]) == 0:
        known = [r[0] for r in lake.con.execute("SELECT snapshot FROM snapshots ORDER BY created_at").fetchall()]
        raise LakeError(f"no pairs snapshot named '{snapshot}' (known: {', '.join(known) or 'none'})")


EXPORT_FORMATS = {"parquet": "(FORMAT parquet, COMPRESSION zstd)", "jsonl": "(FORMAT json)"}


def export_snapshot(lake: Lake, snapshot: str, path: Path, fmt: str | None = None) -> int:
    """Write a snapshot's pairs to one Parquet or JSONL file (format from `fmt` or the suffix).

    DuckDB streams the rows to a temporary sibling that is renamed into place, so `path`
    is never half-written. Returns the number of pairs.
    """
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


def read_pairs(lake: Lake, snapshot: str) -> pa.Table:
    """The pairs of a named snapshot, in a stable order."""
    _require_snapshot(lake, snapshot)
    return lake.arrow(
        "SELECT pair_id, sentence_id, text_a, text_b FROM pairs WHERE snapshot = ? ORDER BY pair_id", [snapshot]
    )
