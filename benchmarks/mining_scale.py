"""Mining hard negatives at 10k, 100k and 1M pairs: seconds and memory (issue 32.1).

`MinedNegatives.negatives` as the pair stage calls it (the candidates read through DuckDB, the
texts laid out, the exclusions, the search, the choice and its rows), with the encoder stood in
for, so that 1M pairs do not need 40 minutes of it first: each text's embedding is made up from
the sentence it names (clustered unit vectors in MiniLM's 384 dimensions; a view a noisy copy
of its sentence's), in the encoder's float32. The pairs are the full profile's: each sentence
paired with two views (`pair.pairings` en-fwd_es and en-bt_es), the candidates the pairs'
positives (`candidates: positives`, the default), `index: auto` (exact below 100k candidates,
faiss HNSW from there). Each size runs in its own process; mining's own memory is its peak
(VmHWM, reset once the embeddings exist) less the RSS then: what it holds beyond the
embeddings and the texts laid out before them (the search, the index, the choice, its rows).

    .venv/bin/python benchmarks/mining_scale.py [--sizes 10000 100000 1000000] [--repeats 1]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))  # PYTHONPATH first: another version side by side

import numpy as np
import pyarrow as pa

from viewmill.cpu import cpu_cores, flags_label
from viewmill.memory import rss_now

DIMENSIONS = 384  # all-MiniLM-L6-v2's
CLUSTER = 50  # sentences per cluster: neighbours close enough to be hard negatives
VIEWS = ("fwd_es", "bt_es")


def pairs_of(n_pairs: int) -> pa.Table:
    """n_pairs pairs: sentence j's text "s<j> ...", paired with its views "s<j> fwd_es ..."/"... bt_es"."""
    sentences = np.arange(n_pairs // len(VIEWS))
    ids = np.char.add("id", sentences.astype(str))
    text = np.char.add(np.char.add("s", sentences.astype(str)), " a sentence of the corpus")
    views = [np.char.add(np.char.add(np.char.add("s", sentences.astype(str)), f" {v} "), "its view") for v in VIEWS]
    n = len(sentences) * len(VIEWS)
    return pa.table({"pair_id": [f"{i:016x}" for i in range(n)], "sentence_id": np.tile(ids, len(VIEWS)),
                     "text_a": np.tile(text, len(VIEWS)), "text_b": np.concatenate(views)})  # fmt: skip


def texts_of(pairs: pa.Table) -> int:
    """Distinct texts mining embeds: the anchors' and the positives'."""
    return len(set(pairs["text_a"].unique().to_pylist()) | set(pairs["text_b"].unique().to_pylist()))


def stand_in_encoder(texts: list[str]):
    """Float32 unit rows: sentence j's cluster centre plus noise, a view's a little more."""
    import torch

    n_sentences = 1 + max(int(t.split(" ", 1)[0][1:]) for t in texts)
    centres = torch.randn(n_sentences // CLUSTER + 1, DIMENSIONS, generator=torch.Generator().manual_seed(0))
    out = torch.empty(len(texts), DIMENSIONS)
    for start in range(0, len(texts), 65536):  # filled in place: no temporary as large as the result
        block = texts[start : start + 65536]
        sentence = torch.tensor([int(t.split(" ", 1)[0][1:]) for t in block])
        generator = torch.Generator().manual_seed(start)
        rows = centres[sentence // CLUSTER] + 0.6 * torch.randn(len(block), DIMENSIONS, generator=generator)
        rows += torch.tensor([0.0 if t.endswith("corpus") else 0.3 for t in block])[:, None] * torch.randn(
            len(block), DIMENSIONS, generator=generator
        )
        out[start : start + len(block)] = rows / rows.norm(dim=1, keepdim=True)
    return out


def reset_peak() -> None:
    """VmHWM back to the RSS now (Linux: clear_refs 5), so making the embeddings is not mining's peak."""
    Path("/proc/self/clear_refs").write_text("5", encoding="ascii")


def peak_now() -> int:
    for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def one_size(n_pairs: int) -> dict:
    """Mine one negative for each of n_pairs pairs, in this process."""
    import torch
    from viewmill.storage.lake import open_lake
    from viewmill.train.mining import MinedNegatives

    from viewmill.settings import Settings

    torch.set_num_threads(cpu_cores())
    pairs = pairs_of(n_pairs)
    spec = MinedNegatives(source="mined")
    made: list[int] = []

    def encode(lake, texts: list[str]):  # in place of MinedNegatives._encode (the store is not timed here)
        vectors = stand_in_encoder(texts)
        reset_peak()  # the stand-in's own temporaries are no part of mining's memory
        made.append(rss_now())
        return vectors

    object.__setattr__(spec, "_encode", encode)
    with (
        tempfile.TemporaryDirectory(prefix="viewmill-mining-") as tmp,
        open_lake(Settings(), Path(tmp) / "lake") as lake,
    ):
        reset_peak()
        before = rss_now()
        start = time.perf_counter()
        rows = spec.negatives(lake, pairs, "v1")
        seconds = time.perf_counter() - start
        peak = peak_now()
    digest = hashlib.sha256()
    for name in rows.column_names:  # the rows' content, to compare two versions' negatives
        digest.update(repr(rows[name].to_pylist()).encode())
    index = json.loads(rows["miner"][0].as_py())["index"] if rows.num_rows else "-"  # the search that ran
    return {"digest": digest.hexdigest()[:16], "pairs": pairs.num_rows, "index": index, "seconds": seconds,
            "rows": rows.num_rows, "peak": peak, "rss_before": before, "rss_embedded": made[0],
            "embeddings_bytes": texts_of(pairs) * DIMENSIONS * 4, "chunk_size": spec.chunk_size,
            "k": spec.window_end()}  # fmt: skip


def spread(values: list[float]) -> str:
    return f"{min(values):.1f} / {statistics.median(values):.1f} / {max(values):.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a child's size
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_size(args.one)))
        return
    print(f"CPU flags: {flags_label()}; {cpu_cores()} cores; load average {os.getloadavg()[0]:.1f}")
    mib = lambda b: f"{b / 2**20:,.0f}"  # noqa: E731
    print("| pairs | search | seconds (min / median / max) | pairs/s | embeddings MiB | mining's own MiB | peak MiB "
          "| rows' digest |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for n in args.sizes:
        runs = []
        for _ in range(args.repeats):
            out = subprocess.run(
                [sys.executable, __file__, "--one", str(n)], check=True, capture_output=True, text=True
            )
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
        seconds = [r["seconds"] for r in runs]
        last = runs[-1]
        own = max(r["peak"] - r["rss_embedded"] for r in runs)
        print(f"| {n:,} | {last['index']} | {spread(seconds)} | {n / statistics.median(seconds):,.0f} | "
              f"{mib(last['embeddings_bytes'])} | {mib(own)} | {mib(max(r['peak'] for r in runs))} | "
              f"{' '.join(sorted({r['digest'] for r in runs}))} |")  # fmt: skip


if __name__ == "__main__":
    main()
