"""BSL post-training configurations over exported pairs snapshots, on any device: the
library's own `train_model` and STS scoring, without the lake (for machines that have
torch but not the rest of viewmill's stack, e.g. a lent GPU box).

    python benchmarks/post_training_sweep.py --plan plan.json --pairs DIR --model DIR \
        --data recipes/data --device cuda --out results/

`plan.json`: {"base": {TrainConfig fields}, "configs": [{"label", "pairs", "set"}]};
`pairs` names DIR/<pairs>.parquet (`viewmill lake export SNAPSHOT file.parquet`). Each
configuration is trained, the exported model (best STS-B dev state, start included,
under the safe preset) scored on STS-B dev, STS-B test and SICK-R test; one JSON line per
configuration goes to results/results.jsonl as soon as it is done, and the untrained
start is scored first.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from viewmill.train.config import TrainConfig
from viewmill.train.encoder import load_sentence_model
from viewmill.train.evaluation.sts import Embedder, StsTask, concatenated, load_task, spearman_x100
from viewmill.train.loop import train_model

TASKS = {
    "stsb-dev": ("stsb", "stsbenchmark/sts-dev.csv"),
    "stsb-test": ("stsb", "stsbenchmark/sts-test.csv"),
    "sickr-test": ("sick", "sick/SICK_test_annotated.txt"),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--plan", type=Path, required=True)
    parser.add_argument("--pairs", type=Path, required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", type=Path, default=Path("recipes/data"))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", nargs="*", help="labels to run (default: all)")
    args = parser.parse_args()
    plan = json.loads(args.plan.read_text())
    data = {
        name: concatenated(load_task(StsTask(name=name, format=fmt, path=args.data / rel)))
        for name, (fmt, rel) in TASKS.items()
    }
    args.out.mkdir(parents=True, exist_ok=True)
    results = args.out / "results.jsonl"

    def scores(model) -> dict[str, float]:
        embed = Embedder(model, batch_size=256)
        return {name: round(spearman_x100(embed, task), 2) for name, task in data.items()}

    start = scores(load_sentence_model(args.model, device=args.device))
    print(json.dumps({"label": "start", **start}), flush=True)
    with results.open("a") as sink:
        sink.write(json.dumps({"label": "start", "scores": start}) + "\n")
    for entry in plan["configs"]:
        if args.only and entry["label"] not in args.only:
            continue
        config = TrainConfig(**{**plan["base"], **entry.get("set", {}), "device": args.device})
        table = pq.read_table(args.pairs / f"{entry['pairs']}.parquet")
        began = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            report = train_model(
                table,
                args.model,
                config,
                Path(tmp) / "model",
                card={"label": entry["label"]},
                keys=table["sentence_id"].to_pylist(),
                dev=lambda model: spearman_x100(Embedder(model, batch_size=256), data["stsb-dev"]),
            )
            figures = scores(load_sentence_model(str(Path(tmp) / "model"), device=args.device))
        row = {
            "label": entry["label"],
            "pairs": entry["pairs"],
            "n_pairs": table.num_rows,
            "set": entry.get("set", {}),
            "scores": figures,
            "best_step": report.best_step,
            "dev_evals": report.dev_evals,
            "seconds": round(time.perf_counter() - began, 1),
        }
        print(json.dumps(row), flush=True)
        with results.open("a") as sink:
            sink.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
