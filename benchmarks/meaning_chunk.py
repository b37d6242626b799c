"""The meaning filter's encoder called on a chunk's texts at a time: the same texts embedded in
calls of 512, 2,048 and 4,096, as the filter does with a fixed chunk of that many sentences.
sentence-transformers sorts each call's texts by length before batching, so a larger call pads
less. Sizes alternate within each repeat; ratios are paired per repeat against the first size.

    python benchmarks/meaning_chunk.py [--texts 8192] [--sizes 512 2048 4096] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ingest import sentences, spread, word_pool
from viewmill.train.encoder import encode_in, load_sentence_model, resolve_encoder

from viewmill.cpu import auto_precision, flags_label


def embed_in_calls(model, texts: list[str], size: int, precision: str) -> float:
    began = time.perf_counter()
    for start in range(0, len(texts), size):
        encode_in(model, texts[start : start + size], precision)
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=8192)
    parser.add_argument("--sizes", type=int, nargs="+", default=[512, 2048, 4096])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--encoder", default="embedded:all-MiniLM-L6-v2")
    args = parser.parse_args()
    precision = auto_precision("cpu")
    model = load_sentence_model(resolve_encoder(args.encoder))
    texts = sentences(args.texts, 0, word_pool()).to_pylist()  # the scale benchmarks' English
    encode_in(model, texts[:256], precision)  # warm-up: the first call allocates
    seconds: dict[int, list[float]] = {size: [] for size in args.sizes}
    for _ in range(args.repeats):
        for size in args.sizes:
            seconds[size].append(embed_in_calls(model, texts, size, precision))
    print(f"CPU flags: {flags_label()}; {args.encoder}, {precision}, {len(texts):,} texts, {args.repeats} repeat(s)")
    print("| texts a call | seconds (min / median / max) | texts/s (median) | speed-up (min / median / max) |")
    print("|---|---|---|---|")
    first = seconds[args.sizes[0]]
    for size, values in seconds.items():
        ratios = [base / value for base, value in zip(first, values, strict=True)]
        rate = len(texts) / statistics.median(values)
        print(f"| {size:,} | {spread(values, '.2f')} | {rate:,.0f} | {spread(ratios, '.2f')} |")


if __name__ == "__main__":
    main()
