"""The demo recipe run twice on a fresh state directory, side by side in one process.

Prints the seconds per stage of both runs and the first/second ratio: the second run
must translate, train and encode nothing. Also prints Apertium round-trip throughput.

    .venv/bin/python benchmarks/demo_rerun.py [--recipe recipes/demo-bsl.yaml]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from viewmill.pipelines.context import RunContext
from viewmill.pipelines.recipe import load_recipe
from viewmill.pipelines.run import run_recipe
from viewmill.pipelines.state import StatePaths


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--recipe", default="recipes/demo-bsl.yaml")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="viewmill-bench-") as tmp:
        state = StatePaths(Path(tmp))
        runs = []
        for _ in range(2):
            start = time.perf_counter()
            summary = run_recipe(RunContext(load_recipe(args.recipe), state))
            runs.append((time.perf_counter() - start, summary))
    (first, s1), (second, s2) = runs
    stages = list(s1["timings"])
    print(f"{'stage':<10} {'first s':>9} {'second s':>9}")
    for stage in stages:
        print(f"{stage:<10} {s1['timings'][stage]:>9.1f} {s2['timings'].get(stage, 0.0):>9.1f}")
    print(f"{'wall':<10} {first:>9.1f} {second:>9.1f}   first/second = {first / second:.1f}x")
    translated = sum(r["cache"]["misses"] for r in s1["augment"].values())
    sentences = sum(r["new_views"] for r in s1["augment"].values())
    print(
        f"Apertium round trips: {sentences} views ({translated} translations) in {s1['timings']['augment']:.1f}s "
        f"= {sentences / s1['timings']['augment']:.0f} round trips/s, {translated / s1['timings']['augment']:.0f} "
        "translations/s (quality signals and lake writes included)"
    )
    print(
        f"second run translations: {sum(r['cache']['misses'] for r in s2['augment'].values())}, "
        f"model reused: {s2['train']['reused']}, evals reused: {all(e['reused'] for e in s2['evals'])}"
    )


if __name__ == "__main__":
    main()
