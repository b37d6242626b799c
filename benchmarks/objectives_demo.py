"""The demo's pairs, one step budget, every objective: STS-B dev/test and SICK-R test.

Runs `viewmill run recipes/demo-bsl.yaml --no-prefect` once per objective with `--set`
overrides into one state directory (ingest, views and the pairs snapshot are made once
and reused), then prints the lake's `evals` side by side.

    .venv/bin/python benchmarks/objectives_demo.py [--state-dir .viewmill-objectives]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from viewmill.storage.lake import Lake

ROOT = Path(__file__).resolve().parents[1]
# Same pairs, steps (120), batch (64) and encoder learning rate (1e-5) for all; heads warm
# up for 40 steps where an objective has one. Other settings are each paper's.
RUNS = {
    "bsl": [],
    "ntxent": ["train.objective=ntxent", "train.head_warmup_steps=0"],
    "infonce": ["train.objective=infonce", "train.head_warmup_steps=0"],
    "sgopt": ["train.objective=sgopt"],
    "bt+sgopt": ["train.objective=sgopt", "train.options.partner_view=true"],
    "isbert": ["train.objective=isbert"],
}
TASKS = ("stsb-dev", "stsb-test", "sickr-test")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--state-dir", default=str(ROOT / ".viewmill-objectives"))
    parser.add_argument("--only", nargs="*", default=list(RUNS))
    args = parser.parse_args()
    viewmill = Path(sys.executable).with_name("viewmill")
    for name in args.only:
        command = [str(viewmill), "run", "recipes/demo-bsl.yaml", "--no-prefect", "--state-dir", args.state_dir]
        for item in RUNS[name]:
            command += ["--set", item]
        print(f"==> {name}: {' '.join(command[1:])}", flush=True)
        subprocess.run(command, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    with Lake(Path(args.state_dir) / "lake", read_only=True) as lake:
        rows = lake.arrow(
            """
            SELECT e.model_label, e.task, e.value, m.train_config, m.model_id
            FROM evals e LEFT JOIN models m ON m.model_id = e.model
            """
        ).to_pylist()
    table: dict[str, dict[str, float]] = {}
    for row in rows:
        if row["model_label"] == "untrained":
            label = "untrained"
        else:
            config = json.loads(row["train_config"])["train_config"]  # the model's manifest
            # manifests written before train.options spell it flat
            reads_partner = (config.get("options") or {}).get("partner_view", config.get("sgopt_partner_view"))
            partner = " (BT: BERT_F reads the partner)" if reads_partner else ""
            label = config["objective"] + partner
        table.setdefault(label, {})[row["task"]] = row["value"]
    print("| model | " + " | ".join(TASKS) + " |")
    print("|---" * (len(TASKS) + 1) + "|")
    for label, values in table.items():
        print(f"| {label} | " + " | ".join(f"{values.get(t, float('nan')):.2f}" for t in TASKS) + " |")


if __name__ == "__main__":
    main()
