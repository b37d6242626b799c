"""Prefect's cost: the demo recipe (full size by default; --limit sentences, --steps training
steps to cut it) run as the Prefect flow and as the same stages called directly,
alternately, each on a fresh state directory, after one small untimed flow has started
Prefect's local server.

    .venv/bin/python benchmarks/orchestration_overhead.py [--limit 3000] [--steps 120] [--repeats 1]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from viewmill.pipelines.orchestration.prefect_env import configure_prefect
from viewmill.pipelines.state import StatePaths

RECIPE = str(Path(__file__).resolve().parents[1] / "recipes" / "demo.yaml")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--limit", type=int, default=3000)
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    overrides = [f"corpus.limit={args.limit}", f"train.steps={args.steps}", "train.head_warmup_steps=5",
                 "train.checkpoint_every=0"]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        configure_prefect(StatePaths(Path(tmp) / "prefect"))
        from transformers.utils import logging as hf_logging
        from viewmill.pipelines.context import RunContext
        from viewmill.pipelines.orchestration.flows import recipe_flow
        from viewmill.pipelines.recipe import load_recipe
        from viewmill.pipelines.run import run_recipe

        hf_logging.disable_progress_bar()
        start = time.perf_counter()
        warm = ["corpus.limit=100", "train.steps=2", "train.head_warmup_steps=1", "train.checkpoint_every=0"]
        recipe_flow(RECIPE, str(Path(tmp) / "warm"), overrides=warm)  # starts the server; untimed
        print(f"first flow (server start included, untimed): {time.perf_counter() - start:.1f} s", flush=True)
        times: dict[str, list[float]] = {"direct": [], "prefect": []}
        for repeat in range(args.repeats):
            for mode in ("direct", "prefect"):
                state = Path(tmp) / f"{mode}-{repeat}"
                start = time.perf_counter()
                if mode == "prefect":
                    summary = recipe_flow(RECIPE, str(state), overrides=overrides)
                else:
                    summary = run_recipe(RunContext(load_recipe(RECIPE, overrides), StatePaths(state)))
                times[mode].append(time.perf_counter() - start)
                stage_times = ", ".join(f"{k} {v:.1f}" for k, v in summary["timings"].items() if k != "total")
                print(f"{mode:<8} run {repeat + 1}: {times[mode][-1]:6.1f} s  (stages: {stage_times})", flush=True)
    direct, flow = statistics.median(times["direct"]), statistics.median(times["prefect"])
    print(f"demo with {args.limit} sentences, {args.steps} training steps, fresh state each run")
    print(f"median direct {direct:.1f} s, as a Prefect flow {flow:.1f} s: overhead {100 * (flow / direct - 1):+.1f}%")


if __name__ == "__main__":
    main()
