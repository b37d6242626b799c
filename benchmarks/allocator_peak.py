"""Training's peak memory and step time on each C allocator, side by side on one snapshot.

Builds (or reuses, with --work) the cheap profile's state at --sentences, then trains --steps
steps on it with `viewmill run` (augment and pair reused) once per allocator for each seed, the
allocators' order rotated from seed to seed. The same seed gives each allocator the same
batches; a `checkpoint_every` above the step count, different per allocator, makes each run
train its own model (no checkpoint is written either way). Prints, per allocator, the whole
process tree's peak RSS and a step's median seconds (the run record's train_step), each as
min / median / max over seeds, and each allocator's ratios to glibc's, paired by seed.

    .venv/bin/python benchmarks/allocator_peak.py --sentences 1000000 --seeds 5 [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ingest import write_corpus
from pipeline_scale import VIEWMILL, child_env, run_record, timed_process
from scale_recipes import install_plugin, recipe

from viewmill.allocator import ALLOCATOR_ENV, find_library
from viewmill.cpu import cpu_cores, flags_label

SYSTEM = "system"  # glibc's malloc, the baseline


def prepared_state(work: Path, sentences: int, env: dict[str, str]) -> tuple[Path, Path]:
    """The cheap profile's recipe and state at `sentences`, run once (ingest, augment, pair)."""
    recipe_path, state = work / "recipe.json", work / "state"
    if not recipe_path.exists():
        corpus = work / "corpus.txt"
        write_corpus(corpus, "text", sentences, 20)
        recipe_path.write_text(json.dumps(recipe("cheap", corpus, "text", steps=1)), encoding="utf-8")
        first = timed_process([*VIEWMILL, "run", str(recipe_path), "--no-prefect", "--no-eval", "--state-dir",
                               str(state)], env)  # fmt: skip
        print(f"state built: {first['seconds']:.0f} s", flush=True)
    return recipe_path, state


def train_once(recipe_path: Path, state: Path, env: dict[str, str], allocator: str, index: int, seed: int,
               steps: int) -> dict[str, float]:  # fmt: skip
    overrides = {"train.seed": seed, "train.steps": steps, "train.checkpoint_every": steps + 1000 + index}
    args = [*VIEWMILL, "run", str(recipe_path), "--no-prefect", "--no-eval", "--state-dir", str(state)]
    args += [item for key, value in overrides.items() for item in ("--set", f"{key}={value}")]
    done = timed_process(args, {**env, ALLOCATOR_ENV: allocator})
    timings = run_record(state)["timings"]
    return {"peak_gib": done["peak_rss"] / 2**30, "step_s": timings["train_step"], "train_s": timings["train"]}


def spread(values: list[float], digits: int = 3) -> str:
    return " / ".join(f"{v:.{digits}f}" for v in (min(values), statistics.median(values), max(values)))


def report(runs: dict[str, list[dict[str, float]]]) -> None:
    print("\n| allocator | peak RSS GiB (min / median / max) | s a step | peak vs glibc | step vs glibc |")
    print("|---|---|---|---|---|")
    for name, rows in runs.items():
        peaks, steps = [r["peak_gib"] for r in rows], [r["step_s"] for r in rows]
        ratios = ["", ""]
        if name != SYSTEM:
            base = runs[SYSTEM]
            ratios = [spread([r["peak_gib"] / b["peak_gib"] for r, b in zip(rows, base, strict=True)], 2),
                      spread([r["step_s"] / b["step_s"] for r, b in zip(rows, base, strict=True)], 2)]  # fmt: skip
        print(f"| {name} | {spread(peaks)} | {spread(steps)} | {ratios[0]} | {ratios[1]} |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sentences", type=int, default=1_000_000)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--work", type=Path, help="keep the state here (reused when it exists)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    allocators = [SYSTEM, *(name for name in ("jemalloc", "tcmalloc") if find_library(name))]
    print(f"CPU flags: {flags_label()}; {cpu_cores()} cores; load average {os.getloadavg()[0]:.1f}; "
          f"{args.sentences:,} sentences, {args.steps} steps (batch 32), {args.seeds} seeds; {allocators}",
          flush=True)  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="viewmill-alloc-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        env = child_env(install_plugin(work / "site"))
        recipe_path, state = prepared_state(work, args.sentences, env)
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in allocators}
        for k in range(args.seeds):
            seed = 1000 + k
            for i in range(len(allocators)):
                name = allocators[(i + k) % len(allocators)]
                row = train_once(recipe_path, state, env, name, allocators.index(name), seed, args.steps)
                runs[name].append(row)
                print(f"seed {seed} {name}: peak {row['peak_gib']:.3f} GiB, {row['step_s']:.3f} s a step", flush=True)
        report(runs)
        if args.json:
            args.json.write_text(json.dumps({"flags": flags_label(), "runs": runs}, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
