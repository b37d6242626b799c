"""Prefect's fixed cost per run: `viewmill run` of the demo recipe's augmentation, cut to 100
sentences and without training or evaluation, on a lake that already holds its views and
pairs (every stage is reused), timed as a whole process in three modes, alternating:

  cold   the state directory's temporary Prefect server stopped first: the run starts it
  warm   the server already up: the run reuses it
  plain  --no-prefect: the same stages without Prefect (the baseline)

    .venv/bin/python benchmarks/prefect_startup.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "viewmill.pipelines.cli.app"]


def _augment_only(tmp: Path) -> Path:
    # No training: a model is reused only while the training code is unchanged, and the
    # fixed cost is measured on a run whose stages all reuse the lake.
    recipe = yaml.safe_load((REPO / "recipes" / "demo.yaml").read_text(encoding="utf-8"))
    recipe.pop("train"), recipe.pop("evaluate")
    recipe["corpus"]["files"] = [str(REPO / "recipes" / f) for f in recipe["corpus"]["files"]]
    recipe["corpus"]["limit"] = 100
    path = tmp / "augment-only.yaml"
    path.write_text(yaml.safe_dump(recipe), encoding="utf-8")
    return path


def _env(tmp: Path) -> dict[str, str]:
    # No configured server: a Prefect home without profiles, no PREFECT_API_URL.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API_") and k != "PREFECT_PROFILE"}
    return {**env, "PREFECT_HOME": str(tmp / "user-prefect-home"), "HF_HUB_OFFLINE": "1"}


def _run(args: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(args, env=env, cwd=REPO, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        env, state = _env(tmp), tmp / "state"
        run = [*CLI, "run", str(_augment_only(tmp)), "--state-dir", str(state)]
        stop = [*CLI, "server", "stop", "--state-dir", str(state)]
        print(f"first run (ingest, augment, pair; untimed): {_run(run, env):.1f} s", flush=True)
        times: dict[str, list[float]] = {"cold": [], "warm": [], "plain": []}
        try:
            for repeat in range(args.repeats):
                for mode in times:
                    if mode == "cold":
                        _run(stop, env)
                    times[mode].append(_run([*run, "--no-prefect"] if mode == "plain" else run, env))
                    print(f"{mode:<5} run {repeat + 1}: {times[mode][-1]:6.2f} s", flush=True)
        finally:
            _run(stop, env)
    plain = statistics.median(times["plain"])
    print(f"\n{'mode':<6} {'min':>7} {'median':>7} {'max':>7}   fixed cost (median - plain median)")
    for mode, values in times.items():
        med = statistics.median(values)
        cost = "" if mode == "plain" else f"{med - plain:+.2f} s"
        print(f"{mode:<6} {min(values):7.2f} {med:7.2f} {max(values):7.2f}   {cost}")


if __name__ == "__main__":
    main()
