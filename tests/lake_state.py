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


def seed_views(lake: Lake, n: int = 6, chunks: int = 3) -> str:
    """`n` sentences with a kept view from augmenters A and B each, committed in `chunks`
    commits (so views has several files: view texts are "view A of s0" ...); returns the
    corpus version."""
    from viewmill.storage.corpus_versions import record_corpus_version
    from viewmill.storage.schema import VIEWS

    ids = [f"s{i}" for i in range(n)]
    for part in range(chunks):
        mine = ids[part::chunks]
        sentences = [{"corpus": "c", "sentence_id": s, "text": f"text {s}", "lang": "en"} for s in mine]
        views = [
            {"view_id": f"{aug}-{s}", "sentence_id": s, "augmenter": aug, "config_hash": f"h{aug}",
             "text": f"view {aug} of {s}", "lang": "en", "status": "kept"}
            for s in mine for aug in ("A", "B")
        ]  # fmt: skip
        with lake.transaction():
            lake.append("sentences", pa.Table.from_pylist(sentences, schema=SENTENCES))
            lake.append("views", pa.Table.from_pylist(views, schema=VIEWS))
    return record_corpus_version(lake, "c", ids, run_id="seed")


def paired_lake(root: Path, n: int = 6, chunks: int = 3) -> str:
    """A `seed_views` lake and one pairs snapshot of it; returns the snapshot's name."""
    with Lake(root) as lake:
        return pair_views(lake, seed_views(lake, n, chunks)).name


def pair_views(lake: Lake, version: str):
    """Pair augmenter A's views with B's for a corpus version of `paired_lake`."""
    from viewmill.storage.snapshots import create_pairs_snapshot

    return create_pairs_snapshot(
        lake, recipe="r", corpus="c", corpus_version=version, pairings=[("hA", "hB")], run_id="run"
    )


def change_in_place(path: Path | str, old: bytes, new: bytes) -> None:
    """Replace every `old` in a file by `new` (same length): the file keeps its size and its
    Parquet footer, as a few flipped bytes would."""
    assert len(old) == len(new)
    data = Path(path).read_bytes()
    assert old in data, f"{old!r} is not in {path}"
    Path(path).write_bytes(data.replace(old, new))


def move_key_into_catalog(root: Path, catalog: str | None = None, *, keep_file: bool = False) -> str:
    """What a lake made before the key file looks like: its signing key in the catalog's
    `viewmill_lake_key` table and no key id there (`keep_file`: the file stays too, as after a
    migration cut short). Returns the key, hex."""
    from viewmill.storage.lake_key import ID_TABLE, LEGACY_TABLE, key_path

    key = key_path(root).read_text(encoding="ascii").strip()
    with Lake(root, catalog=catalog) as lake:
        lake.con.execute(f"CREATE TABLE {LEGACY_TABLE} (key VARCHAR)")
        lake.con.execute(f"INSERT INTO {LEGACY_TABLE} VALUES (?)", [key])
        lake.con.execute(f"DROP TABLE {ID_TABLE}")
    if not keep_file:
        key_path(root).unlink()
    return key
