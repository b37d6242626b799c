"""The lake at scale: write N synthetic views streamed through `Lake.append`, run the
aggregates of docs/lake.md, and do the same work the naive way (pandas holds every row, writes
one Parquet file, reads it all back to aggregate), side by side in one run.

Views look like viewmill's: four augmenters, kept/rejected with reasons, quality and
provenance structs, texts drawn from the demo corpus's sentences (realistic lengths).
Each side runs in its own process so its peak memory (max RSS) is its own.

    .venv/bin/python benchmarks/lake_scale.py [--rows 10000000] [--batch 200000]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import pyarrow as pa
from viewmill.storage.lake import Lake
from viewmill.storage.schema import VIEWS

ROOT = Path(__file__).resolve().parents[1]
AUGMENTERS = [("bt_de", "backtranslation", "en>de>en"), ("bt_fr", "backtranslation", "en>fr>en"),
              ("synonym", "synonym", "wordnet"), ("mlm", "mlm", "mlm")]  # fmt: skip
REASONS = ["chrf<20", "length_ratio>2", "identical_to_source", "repeated_ngram>1"]
AGGREGATES = {
    "views per augmenter and status": "SELECT augmenter, status, count(*) AS n FROM views GROUP BY ALL ORDER BY ALL",
    "mean chrF per pivot": (
        "SELECT path, avg(quality.chrf_to_source) AS mean_chrf, count(*) AS n FROM views "
        "WHERE method = 'backtranslation' GROUP BY path ORDER BY path"
    ),
}


def sentence_pool() -> pa.Array:
    lines = (ROOT / "recipes" / "data" / "snli" / "s1.dev").read_text(encoding="utf-8").splitlines()
    lines += (ROOT / "recipes" / "data" / "snli" / "s2.dev").read_text(encoding="utf-8").splitlines()
    return pa.array(sorted({line.strip() for line in lines if line.strip()}))


def view_batches(rows: int, batch: int, seed: int = 0) -> Iterator[pa.RecordBatch]:
    """Deterministic synthetic views, one Arrow batch at a time (never all in memory)."""
    rng = np.random.default_rng(seed)
    pool = sentence_pool()
    for start in range(0, rows, batch):
        n = min(batch, rows - start)
        ids = np.arange(start, start + n)
        aug = rng.integers(0, len(AUGMENTERS), n)
        rejected = rng.random(n) < 0.15
        chrf = np.clip(rng.normal(55, 15, n), 0, 100)
        ratio = np.clip(rng.normal(1.0, 0.15, n), 0.2, 3)
        hexes = pa.array(np.char.mod("%016x", (ids * 2654435761) % (1 << 62)))
        names = pa.array([a[0] for a in AUGMENTERS]).take(aug)
        quality = pa.StructArray.from_arrays(
            [pa.array(ratio), pa.array(chrf), pa.array(rng.random(n) < 0.03), pa.array(rng.integers(0, 3, n),
             pa.int32()), pa.nulls(n, pa.float64())],
            fields=list(VIEWS.field("quality").type),
        )  # fmt: skip
        engines = pa.array([["apertium", "apertium"]] * len(AUGMENTERS), pa.list_(pa.string())).take(aug)
        provenance = pa.StructArray.from_arrays(
            [engines, engines, pa.nulls(n, pa.string()), pa.array([[]] * n, pa.list_(pa.string()))],
            fields=list(VIEWS.field("provenance").type),
        )
        columns = {
            "view_id": hexes,
            "sentence_id": pa.array(np.char.mod("%012x", ids // len(AUGMENTERS))),
            "augmenter": names,
            "config_hash": names,
            "method": pa.array([a[1] for a in AUGMENTERS]).take(aug),
            "path": pa.array([a[2] for a in AUGMENTERS]).take(aug),
            "text": pool.take(pa.array(rng.integers(0, len(pool), n))),
            "lang": pa.array(["en"] * n),
            "provenance": provenance,
            "quality": quality,
            "status": pa.array(np.where(rejected, "rejected", "kept")),
            "reject_reason": pa.array(np.where(rejected, np.array(REASONS)[rng.integers(0, 4, n)], None)),
            "run_id": pa.array(["bench"] * n),
        }
        yield pa.RecordBatch.from_pydict(columns, schema=VIEWS)


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def median_seconds(run, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def lake_side(workdir: Path, rows: int, batch: int) -> dict:
    start = time.perf_counter()
    with Lake(workdir / "lake") as lake:
        with lake.transaction():
            written = lake.append("views", pa.RecordBatchReader.from_batches(VIEWS, view_batches(rows, batch)))
        write_s = time.perf_counter() - start
        files = lake.arrow("SELECT data_file_size_bytes AS size FROM ducklake_list_files('lake', 'views')")
        sizes = files["size"].to_pylist()
    with Lake(workdir / "lake", read_only=True) as lake:
        aggregates = {name: median_seconds(lambda q=q: lake.arrow(q)) for name, q in AGGREGATES.items()}
        answers = {name: lake.arrow(q).to_pylist() for name, q in AGGREGATES.items()}
    return {
        "rows": written, "write_s": write_s, "peak_gib": peak_rss_gib(), "aggregates_s": aggregates,
        "files": len(sizes), "mean_file_mib": sum(sizes) / max(1, len(sizes)) / 2**20, "answers": answers,
    }  # fmt: skip


def naive_side(workdir: Path, rows: int, batch: int) -> dict:
    import pandas as pd

    start = time.perf_counter()
    frame = pd.concat([b.to_pandas() for b in view_batches(rows, batch)], ignore_index=True)
    frame.to_parquet(workdir / "views.parquet")
    write_s = time.perf_counter() - start
    del frame

    def per_status():
        views = pd.read_parquet(workdir / "views.parquet")
        return views.groupby(["augmenter", "status"]).size()

    def chrf_per_pivot():
        views = pd.read_parquet(workdir / "views.parquet")
        bt = views[views["method"] == "backtranslation"]
        return bt.assign(chrf=bt["quality"].map(lambda q: q["chrf_to_source"])).groupby("path")["chrf"].mean()

    aggregates = {
        "views per augmenter and status": median_seconds(per_status, 3),
        "mean chrF per pivot": median_seconds(chrf_per_pivot, 3),
    }
    return {"rows": rows, "write_s": write_s, "peak_gib": peak_rss_gib(), "aggregates_s": aggregates}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--batch", type=int, default=200_000)
    parser.add_argument("--side", choices=["lake", "naive"], help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:  # a child process: one side, results as JSON on the last line
        side = lake_side if args.side == "lake" else naive_side
        print(json.dumps(side(Path(args.workdir), args.rows, args.batch), default=str))
        return
    results = {}
    with tempfile.TemporaryDirectory(dir=ROOT / ".viewmill" if (ROOT / ".viewmill").is_dir() else None) as tmp:
        for side in ("lake", "naive"):
            out = subprocess.run(
                [sys.executable, __file__, "--side", side, "--workdir", tmp, "--rows", str(args.rows),
                 "--batch", str(args.batch)],
                check=True, capture_output=True, text=True,
            )  # fmt: skip
            results[side] = json.loads(out.stdout.strip().splitlines()[-1])
    lake, naive = results["lake"], results["naive"]
    print(f"{args.rows:,} synthetic views, batches of {args.batch:,}, 2 cores")
    rate = {side: r["rows"] / r["write_s"] for side, r in results.items()}
    print(f"lake (DuckLake, streamed): write {lake['write_s']:7.1f} s = {rate['lake']:>10,.0f} rows/s, "
          f"peak RSS {lake['peak_gib']:.2f} GiB, {lake['files']} files of {lake['mean_file_mib']:.0f} MiB")  # fmt: skip
    print(f"naive (pandas, one file): write {naive['write_s']:7.1f} s = {rate['naive']:>10,.0f} rows/s, "
          f"peak RSS {naive['peak_gib']:.2f} GiB")  # fmt: skip
    print(f"write speed-up {naive['write_s'] / lake['write_s']:.2f}x, "
          f"peak memory {naive['peak_gib'] / lake['peak_gib']:.1f}x lower")  # fmt: skip
    for name in AGGREGATES:
        a, b = lake["aggregates_s"][name], naive["aggregates_s"][name]
        print(f"{name}: lake median {a:.3f} s, naive median {b:.2f} s ({b / a:.0f}x)")
    for name, rows in lake["answers"].items():
        print(f"  {name}: {rows}")


if __name__ == "__main__":
    main()
