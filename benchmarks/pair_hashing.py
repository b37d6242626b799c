"""Verify's snapshot check and pairing's hashing at scale (issue 32.1). Verify reads each
snapshot's pairs and hashes them in pair_id order. Before: the read came unordered, Arrow
sorted it on one thread, and each block's values became Python objects for orjson. Now: DuckDB
orders the read (on every core), the hash skips the sort of rows that already ascend, and a
text column is written as JSON from its bytes. Both sides read the same pairs from a DuckDB
table and must give the same hash; beside them the other steps pairing takes per pair (pair
ids, the sort).

Pairs look like a 1M-sentence run's: 16-hex-digit sentence ids, 32-digit view ids, texts drawn
like `benchmarks/ingest.py`'s (median 13 words), a few with quotes and backslashes. Sides
alternate, `--repeats` times; min/median/max are printed, with MB/s of hashed text.

    .venv/bin/python benchmarks/pair_hashing.py [--pairs 1000000] [--repeats 5] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import duckdb
import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import xxhash
from ingest import sentences, word_pool  # benchmarks/ingest.py's generated English
from viewmill.storage.hex_ids import hex_ids
from viewmill.storage.ids import canonical_json
from viewmill.storage.pair_hashes import HASH_BATCH, HASHED_COLUMNS, pair_ids, pairs_content_hash

from viewmill.cpu import flags_label


def synthetic_pairs(n: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    pool = word_pool()
    text_a = sentences(n, seed, pool)
    text_b = sentences(n, seed + 1, pool)
    quoted = pa.array(rng.random(n) < 0.01)  # a few texts JSON must escape
    text_b = pc.if_else(quoted, pc.binary_join_element_wise('"', text_b, '" \\ said', ""), text_b)
    ids = [hex_ids(rng.integers(0, 2**63, n, dtype=np.uint64)) for _ in range(5)]
    view_a = pc.binary_join_element_wise(ids[1], ids[2], "")
    view_b = pc.binary_join_element_wise(ids[3], ids[4], "")
    table = pa.table({"sentence_id": ids[0], "view_a_id": view_a, "view_b_id": view_b, "text_a": text_a,
                      "text_b": text_b, "lang_a": pa.array(["en"] * n), "lang_b": pa.array(["es"] * n)})  # fmt: skip
    return table.append_column("pair_id", pair_ids(table))


def previous_check(con: duckdb.DuckDBPyConnection) -> str:
    """Verify's snapshot check before: an unordered read, Arrow's sort, orjson of Python objects."""
    pairs = con.execute(f"SELECT {', '.join(HASHED_COLUMNS)} FROM pairs").fetch_arrow_table()
    digest = xxhash.xxh3_128(canonical_json("r").encode("utf-8"))
    for batch in pairs.sort_by("pair_id").combine_chunks().to_batches(max_chunksize=HASH_BATCH):
        digest.update(orjson.dumps([column.to_pylist() for column in batch.columns]))
    return digest.hexdigest()


def snapshot_check(con: duckdb.DuckDBPyConnection) -> str:
    """Verify's snapshot check now (`storage/integrity.py`): read ordered by DuckDB, then hashed."""
    read = con.execute(f"SELECT {', '.join(HASHED_COLUMNS)} FROM pairs ORDER BY pair_id")
    return pairs_content_hash("r", read.fetch_arrow_table())


def timed(work: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    result = work()
    return time.perf_counter() - start, result


def spread(values: list[float]) -> str:
    return f"{min(values):.3f} / {statistics.median(values):.3f} / {max(values):.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    pairs = synthetic_pairs(args.pairs)
    shuffled = pairs.take(pa.array(np.random.default_rng(1).permutation(args.pairs)))
    con = duckdb.connect()
    con.register("shuffled", shuffled)
    con.execute("CREATE TABLE pairs AS SELECT * FROM shuffled")  # stored unordered, as a lake's files are
    text_mb = sum(pairs[name].nbytes for name in HASHED_COLUMNS) / 1e6
    sides: dict[str, Callable[[], object]] = {
        "snapshot check, previous (Arrow sorts, orjson blocks)": lambda: previous_check(con),
        "snapshot check, now (DuckDB sorts, blocks from bytes)": lambda: snapshot_check(con),
        "pair ids (xxh3 of each joined id)": lambda: pair_ids(pairs),
        "sort by pair_id": lambda: pairs.sort_by("pair_id"),
    }
    times: dict[str, list[float]] = {name: [] for name in sides}
    hashes = set()
    for _ in range(args.repeats):
        for name, work in sides.items():
            seconds, result = timed(work)
            times[name].append(seconds)
            if name.startswith("snapshot check"):
                hashes.add(result)
    if len(hashes) != 1:
        raise SystemExit(f"the two sides' content hashes differ: {sorted(hashes)}")
    print(f"CPU flags: {flags_label()}; {args.pairs:,} pairs, {text_mb:.0f} MB of hashed columns")
    print("step: seconds min / median / max; pairs/s and MB/s at the median")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"  {name}: {spread(values)}; {args.pairs / median:,.0f} pairs/s, {text_mb / median:,.0f} MB/s")
    previous, now = (times[name] for name in list(sides)[:2])
    ratios = [old / new for old, new in zip(previous, now, strict=True)]
    print(f"snapshot check, previous / now (paired runs): {spread(ratios)}x")
    if args.json:
        args.json.write_text(json.dumps({"flags": flags_label(), "pairs": args.pairs, "mb": text_mb, "seconds": times}))


if __name__ == "__main__":
    main()
