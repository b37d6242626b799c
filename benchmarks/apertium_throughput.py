"""Apertium round-trip throughput on the demo corpus: the long-lived pipeline per direction
(ApertiumEngine) versus starting `apertium -u <mode>` for every batch, side by side.

Apertium's tagger carries context from one sentence to the next, also across batches in a
long-lived pipeline, so a few round trips differ between the two ways; the share of
identical round trips is printed.

    .venv/bin/python benchmarks/apertium_throughput.py [--batch 64 512]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from viewmill.augment.apertium import ApertiumEngine
from viewmill.augment.engines import DecodingSpec
from viewmill.pipelines.recipe import load_recipe
from viewmill.pipelines.stages import RunContext
from viewmill.pipelines.state import StatePaths


def one_shot(texts: list[str], mode: str) -> list[str]:
    out = subprocess.run(["apertium", "-u", mode], input="\n".join(texts) + "\n", capture_output=True, text=True)
    return out.stdout.splitlines()


def round_trips(texts: list[str], batch: int, translate) -> tuple[float, list[str]]:
    start, results = time.perf_counter(), []
    for i in range(0, len(texts), batch):
        chunk = texts[i : i + batch]
        results.extend(translate(translate(chunk, "en", "es"), "es", "en"))
    return time.perf_counter() - start, results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, nargs="+", default=[64, 512])
    args = parser.parse_args()
    table = RunContext(load_recipe("recipes/demo.yaml"), StatePaths(Path("/nonexistent"))).corpus().sentences
    texts = table["text"].to_pylist()
    engines = {("en", "es"): ApertiumEngine("en", "es"), ("es", "en"): ApertiumEngine("es", "en")}

    def long_lived(chunk, src, tgt):
        return [h[0] for h in engines[(src, tgt)].translate(chunk, src, tgt, DecodingSpec())]

    def per_batch_process(chunk, src, tgt):
        return [line.strip() for line in one_shot(chunk, engines[(src, tgt)].mode)]

    print(f"{len(texts)} sentences, round trip en>es>en, 2 cores")
    for batch in args.batch:
        slow, expected = round_trips(texts, batch, per_batch_process)
        fast, got = round_trips(texts, batch, long_lived)
        assert len(got) == len(expected) == len(texts)
        same = sum(a == b for a, b in zip(got, expected, strict=True)) / len(texts)
        print(
            f"batch {batch:>4}: process per batch {len(texts) / slow:7.0f} round trips/s | "
            f"long-lived pipeline {len(texts) / fast:7.0f} round trips/s | speed-up {slow / fast:.2f}x | "
            f"identical round trips {same:.1%}"
        )
    for engine in engines.values():
        engine.close()


if __name__ == "__main__":
    main()
