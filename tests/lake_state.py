"""What a fault test compares before and after: every table's row count, the lake's
version and the content hash of every pairs snapshot."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from viewmill.storage.lake import Lake
from viewmill.storage.schema import SENTENCES, TABLES


def lake_state(root: Path, catalog: str | None = None) -> dict:
    with Lake(root, read_only=True, catalog=catalog) as lake:
        counts = {name: lake.scalar(f"SELECT count(*) FROM {name}") for name in TABLES}
        snapshots = dict(lake.con.execute("SELECT snapshot, content_hash FROM snapshots ORDER BY snapshot").fetchall())
        return {"counts": counts, "version": lake.version(), "snapshots": snapshots}


def small_lake(root: Path, n: int = 3, catalog: str | None = None) -> Path:
    """A lake holding `n` sentences (one commit)."""
    rows = [
        {"corpus": "c", "sentence_id": f"s{i}", "text": f"sentence {i}", "lang": "en", "split": None,
         "origin": None, "run_id": "r0"}
        for i in range(n)
    ]  # fmt: skip
    with Lake(root, catalog=catalog) as lake:
        lake.append("sentences", pa.Table.from_pylist(rows, schema=SENTENCES))
    return root
