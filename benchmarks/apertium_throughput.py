"""Apertium round-trip throughput on the demo corpus: the long-lived pipeline per direction
(ApertiumEngine) versus starting `apertium -u <mode>` for every batch, side by side.

Apertium's tagger carries context from one sentence to the next, also across batches in a
long-lived pipeline, so a few round trips differ between the two ways; the share of
identical round trips is printed.

With `--cli`: the engine against the plain command line over a file, `apertium -u eng-spa
in out` then `apertium -u spa-eng out back` (-u: no marks on unknown words, as the engine),
on the same sentences, alternating the two `--repeats` times so both see the same load.

    .venv/bin/python benchmarks/apertium_throughput.py [--batch 64 512] [--cli --repeats 3]
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
from viewmill.pipelines.context import RunContext
from viewmill.pipelines.recipe import load_recipe
from viewmill.pipelines.state import StatePaths


def one_shot(texts: list[str], mode: str) -> list[str]:
    out = subprocess.run(["apertium", "-u", mode], input="\n".join(texts) + "\n", capture_output=True, text=True)
    return out.stdout.splitlines()


def cli_round_trip(texts: list[str], folder: Path) -> tuple[float, list[str]]:
    """en>es>en with the `apertium` command over files, as a user would run it."""
    source, spanish, back = folder / "en.txt", folder / "es.txt", folder / "back.txt"
    source.write_text("\n".join(texts) + "\n", encoding="utf-8")
    start = time.perf_counter()
    subprocess.run(["apertium", "-u", "eng-spa", str(source), str(spanish)], check=True)
    subprocess.run(["apertium", "-u", "spa-eng", str(spanish), str(back)], check=True)
    seconds = time.perf_counter() - start
    return seconds, [line.strip() for line in back.read_text(encoding="utf-8").splitlines()]


def against_cli(texts: list[str], batch: int, long_lived, repeats: int) -> None:
    import statistics
    import tempfile

    cli, engine, same = [], [], 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeats):
            seconds, expected = cli_round_trip(texts, Path(tmp))
            cli.append(seconds)
            seconds, got = round_trips(texts, batch, long_lived)
            engine.append(seconds)
            assert len(got) == len(expected) == len(texts)
            same = sum(a == b for a, b in zip(got, expected, strict=True)) / len(texts)
    ratios = [e / c for e, c in zip(engine, cli, strict=True)]
    print(
        f"apertium command over a file: median {len(texts) / statistics.median(cli):6.0f} round trips/s | "
        f"engine, batches of {batch}: median {len(texts) / statistics.median(engine):6.0f} round trips/s | "
        f"engine time / command time per repeat: min {min(ratios):.2f} median {statistics.median(ratios):.2f} "
        f"max {max(ratios):.2f} | identical round trips {same:.1%}"
    )


def round_trips(texts: list[str], batch: int, translate) -> tuple[float, list[str]]:
    start, results = time.perf_counter(), []
    for i in range(0, len(texts), batch):
        chunk = texts[i : i + batch]
        results.extend(translate(translate(chunk, "en", "es"), "es", "en"))
    return time.perf_counter() - start, results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, nargs="+", default=[64, 512])
    parser.add_argument("--cli", action="store_true", help="compare with the apertium command over a file")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    table = RunContext(load_recipe("recipes/demo.yaml"), StatePaths(Path("/nonexistent"))).corpus().sentences
    texts = table["text"].to_pylist()
    engines = {("en", "es"): ApertiumEngine("en", "es"), ("es", "en"): ApertiumEngine("es", "en")}

    def long_lived(chunk, src, tgt):
        return [h[0] for h in engines[(src, tgt)].translate(chunk, src, tgt, DecodingSpec())]

    def per_batch_process(chunk, src, tgt):
        return [line.strip() for line in one_shot(chunk, engines[(src, tgt)].mode)]

    print(f"{len(texts)} sentences, round trip en>es>en, 2 cores")
    if args.cli:
        for batch in args.batch:
            against_cli(texts, batch, long_lived, args.repeats)
        for engine in engines.values():
            engine.close()
        return
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
