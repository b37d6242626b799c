"""How soon a new user hears back: usage errors and missing files (budget: 0.5 s each, issue
33.7), and `viewmill sql "SELECT 1"` against DuckDB opening the same lake in a bare Python.

Each command is a whole process timed from outside, interleaved with the others so a busy
machine slows all of them alike, after one untimed warm-up each; min, median and max of
--repeats runs. A usage error must exit 2; the other commands 0.

    .venv/bin/python benchmarks/first_words.py [--repeats 10]
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

from cli_startup import PYTHON, VIEWMILL, _open_lake_code

from viewmill.cpu import flags_label

BUDGET_S = 0.5


def commands(folder: Path) -> dict[str, tuple[list[str], int]]:
    """Name -> (argv, expected exit status), run from `folder` (which holds r.yaml and a state)."""
    state = str(folder / "state")
    usage = {
        "run nope.yaml": [VIEWMILL, "run", "recipes/nope.yaml"],
        "train nope.yaml": [VIEWMILL, "train", "recipes/nope.yaml"],
        "sweep nope.yaml": [VIEWMILL, "sweep", "recipes/nope.yaml"],
        "serve nope.yaml": [VIEWMILL, "serve", "recipes/nope.yaml"],
        "deploy nope.yaml": [VIEWMILL, "deploy", "recipes/nope.yaml"],
        "run --dask w/o prefect": [VIEWMILL, "run", "r.yaml", "--no-prefect", "--dask", "local:2"],
        "train --snapshot nope": [VIEWMILL, "train", "r.yaml", "--snapshot", "nope", "--state-dir", state],
        "run (no recipe)": [VIEWMILL, "run"],
        "unknown command": [VIEWMILL, "rnu"],
        "sql (no query)": [VIEWMILL, "sql", "--state-dir", state],
    }
    runs = {name: (argv, 2) for name, argv in usage.items()}
    runs["python-duckdb"] = ([PYTHON, "-c", "import duckdb; duckdb.connect().sql('SELECT 1')"], 0)
    runs["python-lake"] = ([PYTHON, "-c", _open_lake_code(folder / "state")], 0)
    runs["sql SELECT 1"] = ([VIEWMILL, "sql", "SELECT 1", "--state-dir", state], 0)
    return runs


def timed(argv: list[str], expected: int, cwd: Path) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, cwd=cwd)
    elapsed = time.perf_counter() - start
    if done.returncode != expected:
        sys.exit(f"{' '.join(argv)}: exit {done.returncode}, not {expected}:\n{done.stderr[-3000:]}")
    return elapsed


def report(times: dict[str, list[float]], expected: dict[str, int]) -> None:
    print(f"\n{'command':<24} {'min':>7} {'median':>7} {'max':>7}  (seconds, {len(times['sql SELECT 1'])} runs each)")
    for name, values in times.items():
        verdict = ""
        if expected[name] == 2:
            verdict = "  within budget" if statistics.median(values) <= BUDGET_S else f"  OVER {BUDGET_S} s"
        print(f"{name:<24} {min(values):7.3f} {statistics.median(values):7.3f} {max(values):7.3f}{verdict}")
    sql, lake = statistics.median(times["sql SELECT 1"]), statistics.median(times["python-lake"])
    print(f"\nsql SELECT 1 - python-lake, medians: {sql - lake:+.3f} s ({sql / lake:.2f}x)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    print(f"CPU flags: {flags_label()}; python {sys.version.split()[0]}; {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        (folder / "r.yaml").write_text("name: r\n", encoding="utf-8")
        timed([VIEWMILL, "lake", "init", "--state-dir", str(folder / "state")], 0, folder)
        runs = commands(folder)
        for argv, expected in runs.values():  # warm-up: the OS's file cache, Python's bytecode cache
            timed(argv, expected, folder)
        times: dict[str, list[float]] = {key: [] for key in runs}
        for _ in range(args.repeats):
            for key, (argv, expected) in runs.items():
                times[key].append(timed(argv, expected, folder))
    report(times, {key: expected for key, (_, expected) in runs.items()})


if __name__ == "__main__":
    main()
