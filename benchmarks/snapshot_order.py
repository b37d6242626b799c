"""Pairing's order and the reads of a snapshot (issue 32.1, twentieth session).

Before: pairing sorted the candidate pairs by sentence and views, filtered out the identical
ones (a copy of every column), added pair ids, and the content hash sorted the hashed columns by
pair_id again; the files were written in sentence order, so each reader's ORDER BY pair_id
sorted a shuffled snapshot. Now (`storage/snapshots.py`, `_kept_by_pair_id`): one take of the
whole table puts the kept pairs in pair_id order, the hash finds them ascending, and the files
are written in that order. Both sides must give the same content hash.

The read side times verify's snapshot read (`SELECT ... ORDER BY pair_id`, DuckDB with the
lake's settings: a thread per core, insertion order not kept) from Parquet files holding the
same pairs in either order. Pairs are `pair_hashing.py`'s synthetic ones, 9% with identical
texts (the demo's share). Sides alternate, `--repeats` times; min/median/max are printed.

    .venv/bin/python benchmarks/snapshot_order.py [--pairs 1000000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pair_hashing import spread, synthetic_pairs, timed
from viewmill.storage.integrity import SNAPSHOT_HASH_READS
from viewmill.storage.pair_hashes import pair_ids, pairs_content_hash
from viewmill.storage.snapshots import _kept_by_pair_id

from viewmill.cpu import cpu_cores, flags_label

SENTENCE_ORDER = [("sentence_id", "ascending"), ("view_b_id", "ascending"), ("view_a_id", "ascending")]


def candidates(n: int) -> pa.Table:
    """Candidate pairs as the join gives them: unordered, no pair id, 9% with identical texts."""
    pairs = synthetic_pairs(n).drop_columns(["pair_id"])
    same = pa.array(np.random.default_rng(2).random(n) < 0.09)
    pairs = pairs.set_column(4, "text_b", pc.if_else(same, pairs["text_a"], pairs["text_b"]))
    return pairs.take(pa.array(np.random.default_rng(3).permutation(n)))


def previous_pairing(pairs: pa.Table) -> tuple[pa.Table, str]:
    """The previous commit's steps: sentence order, filter, ids; the hash sorts by pair_id."""
    pairs = pairs.sort_by(SENTENCE_ORDER)
    pairs = pairs.filter(pc.not_equal(pairs["text_a"], pairs["text_b"]))
    pairs = pairs.append_column("pair_id", pair_ids(pairs))
    return pairs, pairs_content_hash("r", pairs)


def current_pairing(pairs: pa.Table) -> tuple[pa.Table, str]:
    pairs, _ = _kept_by_pair_id(pairs, keep_identical=False)
    return pairs, pairs_content_hash("r", pairs)


def ordered_read(con: duckdb.DuckDBPyConnection, path: Path) -> pa.Table:
    sql = f"SELECT {SNAPSHOT_HASH_READS} FROM read_parquet(?) ORDER BY pair_id"
    return con.execute(sql, [str(path)]).to_arrow_table()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    table = candidates(args.pairs)
    before, old_hash = previous_pairing(table)
    now, new_hash = current_pairing(table)
    if old_hash != new_hash:
        raise SystemExit(f"the two pairings' content hashes differ: {old_hash} {new_hash}")
    con = duckdb.connect(config={"threads": cpu_cores(), "preserve_insertion_order": False})
    with tempfile.TemporaryDirectory(prefix="viewmill-order-") as folder:
        files = {"sentence": Path(folder) / "sentence.parquet", "pair_id": Path(folder) / "pair_id.parquet"}
        pq.write_table(before, files["sentence"])
        pq.write_table(now, files["pair_id"])
        sides: dict[str, Callable[[], object]] = {
            "pairing's order, ids and hash: previous": lambda: previous_pairing(table),
            "pairing's order, ids and hash: now": lambda: current_pairing(table),
            "verify's read, files in sentence order": lambda: ordered_read(con, files["sentence"]),
            "verify's read, files in pair_id order": lambda: ordered_read(con, files["pair_id"]),
        }
        times: dict[str, list[float]] = {name: [] for name in sides}
        for repeat in range(args.repeats):
            for name in sides if repeat % 2 == 0 else reversed(sides):
                times[name].append(timed(sides[name])[0])
    print(f"CPU flags: {flags_label()}; {args.pairs:,} candidate pairs, {now.num_rows:,} kept; same content hash")
    print("side: seconds min / median / max")
    for name, values in times.items():
        print(f"  {name}: {spread(values)}")
    names = list(sides)
    for old, new in ((names[0], names[1]), (names[2], names[3])):
        ratios = [a / b for a, b in zip(times[old], times[new], strict=True)]
        print(f"{old.split(':')[0].split(',')[0]}, previous / now (paired): {spread(ratios)}x")


if __name__ == "__main__":
    main()
