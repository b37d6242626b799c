"""The meaning filter's encoder in fp32 and bf16 autocast, side by side (issue 32.1): texts a
second, and how many of the filter's decisions change.

Sources are benchmarks/ingest.py's generated English; views are their real Apertium round trips
en>es>en. Each side embeds every source and view with the filter's own judge
(`pipelines.stages.augment.meaning_judge`, its batches, a fresh process cache per repeat),
alternating, `--repeats` times. Decisions: a view is kept when its cosine to its source lies in
[min_cosine, max_cosine]; the thresholds are the filter's defaults and the scale recipe's.

    .venv/bin/python benchmarks/meaning_precision.py [--sentences 2000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
from ingest import sentences, word_pool  # benchmarks/ingest.py's generated English
from viewmill.augment.apertium import ApertiumEngine
from viewmill.augment.engines import DecodingSpec
from viewmill.augment.meaning import MeaningSpec
from viewmill.augment.models import release_models
from viewmill.pipelines.stages.augment import meaning_judge

from viewmill.cpu import flags_label

THRESHOLDS = {"filter's defaults [0.7, 0.98]": (0.7, 0.98), "scale recipe's [0.1, 0.999]": (0.1, 0.999)}


def round_trips(texts: list[str]) -> list[str]:
    for src, tgt in (("en", "es"), ("es", "en")):
        engine = ApertiumEngine(src, tgt)
        texts = [h[0] for h in engine.translate(texts, src, tgt, DecodingSpec())]
        engine.close()
    return texts


def cosines(vectors: np.ndarray, n: int) -> np.ndarray:
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    return (unit[:n] * unit[n:]).sum(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    sources = [s for s in sentences(args.sentences, 0, word_pool()).to_pylist() if 3 <= len(s.split()) <= 64]
    texts = sources + round_trips(sources)
    seconds: dict[str, list[float]] = {"fp32": [], "bf16": []}
    scores: dict[str, np.ndarray] = {}
    for _ in range(args.repeats):
        for precision in seconds:
            release_models()  # a fresh encoder and cache: every text embedded again
            judge = meaning_judge(MeaningSpec(), precision)
            judge.embed(["warm up the meaning encoder"])
            start = time.perf_counter()
            vectors = judge.embed(texts)
            seconds[precision].append(time.perf_counter() - start)
            scores[precision] = cosines(vectors, len(sources))
    print(f"CPU flags: {flags_label()}; {len(sources):,} sources and their en>es>en round trips, {len(texts):,} texts")
    for precision, values in seconds.items():
        rates = [len(texts) / s for s in values]
        print(f"  {precision}: {min(rates):,.0f} / {statistics.median(rates):,.0f} / {max(rates):,.0f} texts/s")
    ratios = [full / half for full, half in zip(seconds["fp32"], seconds["bf16"], strict=True)]
    print(f"  bf16 / fp32 speed, paired: {min(ratios):.2f} / {statistics.median(ratios):.2f} / {max(ratios):.2f}x")
    gap = np.abs(scores["fp32"] - scores["bf16"])
    print(f"  |cosine fp32 - bf16|: median {np.median(gap):.5f}, max {gap.max():.5f}")
    for name, (low, high) in THRESHOLDS.items():
        kept = {p: (s >= low) & (s <= high) for p, s in scores.items()}
        flipped = int((kept["fp32"] != kept["bf16"]).sum())
        print(f"  {name}: kept fp32 {int(kept['fp32'].sum())}, bf16 {int(kept['bf16'].sum())}, "
              f"decisions changed {flipped} of {len(sources)} ({flipped / len(sources):.2%})")  # fmt: skip


if __name__ == "__main__":
    main()
