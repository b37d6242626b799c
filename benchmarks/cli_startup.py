"""How long `viewmill` takes to start, against DuckDB doing the same work in a bare Python.

Four commands, each a whole process timed from outside (as hyperfine does), interleaved so a
busy machine slows all of them alike, after one untimed warm-up each:

  python-duckdb   python -c "import duckdb; duckdb.connect().sql('SELECT 1')"
  python-lake     the same, then the lake opened as viewmill opens it (DuckLake and SQLite
                  extensions loaded by path, the catalog attached read-only), then SELECT 1
  version         viewmill --version
  sql             viewmill sql "SELECT 1" on a small lake (made here by `viewmill lake init`)

The goal (issue 23.8): `version` within 1.5x of python-duckdb, `sql` within 1.5x of python-lake.
With --before REF (e.g. HEAD), the same two viewmill commands of that commit run alongside
(its files from `git archive`, imported in place of this checkout's), to show the change.

    .venv/bin/python benchmarks/cli_startup.py [--repeats 20] [--before HEAD]
"""

from __future__ import annotations

import argparse
import glob
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from viewmill.cpu import flags_label

PYTHON = sys.executable
VIEWMILL = str(Path(sys.executable).with_name("viewmill"))
REPO = Path(__file__).resolve().parents[1]
GOAL = 1.5
# Runs another commit's CLI: the editable install's finder pointed at that commit's folders.
OLD_CLI = """import importlib, sys
finder = importlib.import_module({finder!r})
finder.MAPPING.update({mapping!r})
sys.argv = ["viewmill", *sys.argv[1:]]
from viewmill.pipelines.cli.app import app
app()
"""


def _timed(args: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(args, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return elapsed


def _open_lake_code(state: Path) -> str:
    """A bare-duckdb script opening the lake exactly as viewmill's Lake does (read-only)."""
    from viewmill.storage.catalog import extension_path, sql_literal
    from viewmill.storage.lake import Lake

    with Lake(state / "lake", read_only=True) as lake:
        uri, data, extension = lake.catalog.uri, lake.data_path.rstrip("/") + "/", lake.catalog.extension
    loads = "; ".join(f"con.execute({f'LOAD {sql_literal(str(extension_path(name)))}'!r})"
                      for name in ("ducklake", extension) if name)  # fmt: skip
    attach = (f"ATTACH {sql_literal(uri)} AS lake (READ_ONLY, META_BUSY_TIMEOUT 60000, "
              f"DATA_PATH {sql_literal(data)})")  # fmt: skip
    return f"import duckdb; con = duckdb.connect(); {loads}; con.execute({attach!r}); con.sql('SELECT 1').fetchall()"


def old_cli(ref: str, folder: Path) -> list[str]:
    """A command line running commit `ref`'s viewmill (its tree unpacked into `folder`)."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", ref], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    site = Path(sys.prefix) / "lib" / "python3*" / "site-packages"
    finders = glob.glob(str(site / "__editable___viewmill_*finder.py"))
    if not finders:
        sys.exit("--before needs viewmill installed editable (pip install -e .): no editable finder found")
    mapping = {"viewmill": str(folder / "viewmill"),
               **{f"viewmill.{layer}": str(folder / layer) for layer in ("augment", "pipelines", "storage", "train")}}
    return [PYTHON, "-c", OLD_CLI.format(finder=Path(finders[0]).stem, mapping=mapping)]  # fmt: skip


def commands(state: Path, old: list[str] | None) -> dict[str, list[str]]:
    runs = {
        "python-duckdb": [PYTHON, "-c", "import duckdb; duckdb.connect().sql('SELECT 1')"],
        "python-lake": [PYTHON, "-c", _open_lake_code(state)],
        "version": [VIEWMILL, "--version"],
        "sql": [VIEWMILL, "sql", "SELECT 1", "--state-dir", str(state)],
    }
    if old is not None:
        runs["before:version"] = [*old, "--version"]
        runs["before:sql"] = [*old, "sql", "SELECT 1", "--state-dir", str(state)]
    return runs


def report(times: dict[str, list[float]]) -> None:
    print(f"\n{'command':<15} {'min':>7} {'median':>7} {'max':>7}  (seconds, {len(times['sql'])} runs each)")
    for name, values in times.items():
        print(f"{name:<15} {min(values):7.3f} {statistics.median(values):7.3f} {max(values):7.3f}")
    print(f"\nratios, min/min median/median max/max (goal <= {GOAL}x at the median)")
    pairs = [("version", "python-duckdb"), ("sql", "python-lake")]
    pairs += [(f"before:{name}", base) for name, base in pairs if f"before:{name}" in times]
    for name, base in pairs:
        lows = min(times[name]) / min(times[base])
        meds = statistics.median(times[name]) / statistics.median(times[base])
        highs = max(times[name]) / max(times[base])
        verdict = "met" if meds <= GOAL else "NOT met"
        print(f"{name:>14} / {base:<14} {lows:6.2f}x {meds:6.2f}x {highs:6.2f}x  {verdict} (median)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--before", metavar="REF", help="also time this commit's viewmill (e.g. HEAD)")
    args = parser.parse_args()
    print(f"CPU flags: {flags_label()}; python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory() as name:
        state = Path(name) / "state"
        _timed([VIEWMILL, "lake", "init", "--state-dir", str(state)])
        old = None
        if args.before:
            (Path(name) / "before").mkdir()
            old = old_cli(args.before, Path(name) / "before")
        runs = commands(state, old)
        for argv in runs.values():  # warm-up: the OS's file cache, Python's bytecode cache
            _timed(argv)
        times: dict[str, list[float]] = {key: [] for key in runs}
        for _ in range(args.repeats):
            for key, argv in runs.items():
                times[key].append(_timed(argv))
    report(times)


if __name__ == "__main__":
    main()
