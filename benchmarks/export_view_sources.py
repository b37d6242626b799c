"""Make the views and pairs of every configuration of a sweep recipe in the lake (ingest,
augment, pair; no training) and export each pairs snapshot to Parquet, named by its label,
for `benchmarks/post_training_sweep.py` on a machine without the lake's stack.

    .venv/bin/python benchmarks/export_view_sources.py recipes/snli-view-sources.yaml \
        --state-dir /tmp/snli-state --out pairs/ [--name LABEL=FILE_STEM ...]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from viewmill.pipelines.context import RunContext
from viewmill.pipelines.recipe import load_recipe
from viewmill.pipelines.run import run_recipe
from viewmill.pipelines.state import StatePaths
from viewmill.storage.lake import Lake
from viewmill.storage.snapshots import export_snapshot


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("recipe")
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--name", action="append", default=[], help="LABEL=STEM: file name for a label")
    args = parser.parse_args()
    stems = dict(item.split("=", 1) for item in args.name)
    state = StatePaths(args.state_dir.resolve())
    args.out.mkdir(parents=True, exist_ok=True)
    for config in load_recipe(args.recipe).sweep.expand():
        began = time.perf_counter()
        ctx = RunContext(load_recipe(args.recipe, config.overrides()), state)
        summary = run_recipe(ctx, train=False, evaluate=False)
        snapshot = summary["snapshot"]
        with Lake(state.lake) as lake:
            export_snapshot(lake, snapshot["name"], args.out / f"{stems.get(config.label, config.label)}.parquet")
        kept = {name: (r["kept"], r["rejected"]) for name, r in summary["augment"].items()}
        print(f"{config.label}: {snapshot['n_pairs']} pairs, {time.perf_counter() - began:.1f} s, kept/rejected {kept}")


if __name__ == "__main__":
    main()
