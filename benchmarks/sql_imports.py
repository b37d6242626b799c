"""Where `viewmill sql "SELECT 1"` spends its start-up beyond DuckDB opening the lake (issue 34.8).

Runs the command under `python -X importtime` and adds up each top-level package's own import
time (self time, so nothing is counted twice), grouped by who needs it: DuckDB (python-lake
imports it too), pyarrow + numpy (the result reaches Python as Arrow batches), the CLI (Typer,
its vendored Click, rich, and pydantic, which Typer 0.29 imports to coerce every parameter),
viewmill's own modules, and the rest. Also times python-lake and the command whole, interleaved;
min / median / max of --repeats runs.

    .venv/bin/python benchmarks/sql_imports.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
from collections import defaultdict
from pathlib import Path

from cli_startup import PYTHON, VIEWMILL, _open_lake_code, _timed

from viewmill.cpu import flags_label

PYDANTIC = "pydantic (typer's coercion, settings)"
GROUPS = {
    "duckdb": "duckdb", "_duckdb": "duckdb",
    "pyarrow": "pyarrow + numpy", "numpy": "pyarrow + numpy",
    "typer": "CLI: typer, rich", "click": "CLI: typer, rich", "rich": "CLI: typer, rich",
    "pydantic": PYDANTIC, "pydantic_core": PYDANTIC, "annotated_types": PYDANTIC, "typing_inspection": PYDANTIC,
    "viewmill": "viewmill", "filelock": "viewmill",
}  # fmt: skip
RUN_SQL = "import sys; sys.argv = ['viewmill', *sys.argv[1:]]; from viewmill.pipelines.cli.app import app; app()"


def import_seconds(state: Path) -> dict[str, float]:
    """Self import time per group of one `viewmill sql "SELECT 1"` process."""
    done = subprocess.run([PYTHON, "-X", "importtime", "-c", RUN_SQL, "sql", "SELECT 1", "--state-dir", str(state)],
                          capture_output=True, text=True, check=True)  # fmt: skip
    totals: dict[str, float] = defaultdict(float)
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        own, _, name = line.removeprefix("import time:").split("|")
        top = name.strip().split(".")[0]
        totals[GROUPS.get(top, "other (stdlib, site)")] += int(own) / 1e6
    return totals


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"CPU flags: {flags_label()}; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as name:
        state = Path(name) / "state"
        subprocess.run([VIEWMILL, "lake", "init", "--state-dir", str(state)], capture_output=True, check=True)
        runs = {"python-lake": [PYTHON, "-c", _open_lake_code(state)],
                "viewmill sql": [VIEWMILL, "sql", "SELECT 1", "--state-dir", str(state)]}  # fmt: skip
        for argv in runs.values():
            _timed(argv)  # warm-up
        times: dict[str, list[float]] = defaultdict(list)
        groups: dict[str, list[float]] = defaultdict(list)
        for _ in range(args.repeats):
            for key, argv in runs.items():
                times[key].append(_timed(argv))
            for group, seconds in import_seconds(state).items():
                groups[group].append(seconds)
    print(f"\n{'process (wall)':<40} {'min':>7} {'median':>7} {'max':>7}")
    for key, values in times.items():
        print(f"{key:<40} {min(values):7.3f} {statistics.median(values):7.3f} {max(values):7.3f}")
    ratio = statistics.median(times["viewmill sql"]) / statistics.median(times["python-lake"])
    print(f"viewmill sql / python-lake, medians: {ratio:.2f}x (goal 1.5x)")
    print(f"\n{'imports of viewmill sql (self time)':<40} {'min':>7} {'median':>7} {'max':>7}")
    for group, values in sorted(groups.items(), key=lambda item: -statistics.median(item[1])):
        print(f"{group:<40} {min(values):7.3f} {statistics.median(values):7.3f} {max(values):7.3f}")


if __name__ == "__main__":
    main()
