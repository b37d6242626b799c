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

With `--recipe FILE`, the recipe's train section is the base (the plan's `base` and each
configuration's `set` over it), its `train.dev` tasks and `train.selection` rule choose the
exported state as `viewmill run` would, and its `evaluate.tasks` are scored; `data:` paths
resolve under `--data` (a folder laid out as `viewmill data fetch` leaves it).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from train_steps import train_fields  # benchmarks/train_steps.py
from viewmill.train.config import TrainConfig
from viewmill.train.dev_scores import DevResult
from viewmill.train.encoder import load_sentence_model
from viewmill.train.evaluation.sts import Embedder, StsTask, concatenated, load_task, model_scores, spearman_x100
from viewmill.train.loop import train_model

TASKS = {
    "stsb-dev": ("stsb", "stsbenchmark/sts-dev.csv"),
    "stsb-test": ("stsb", "stsbenchmark/sts-test.csv"),
    "sickr-test": ("sick", "sick/SICK_test_annotated.txt"),
}


def recipe_tasks(recipe: dict, data: Path) -> tuple[dict, dict, dict, dict]:
    """A recipe's train base, dev sets, dev weights and evaluation sets (`data:` under `data`)."""

    def task(entry: dict) -> StsTask:
        path = str(entry["path"])
        fields = {k: v for k, v in entry.items() if k not in ("path", "weight")}
        return StsTask(**fields, path=data / path.removeprefix("data:"))

    train = recipe["train"]
    base = train_fields(recipe)
    dev = {entry["name"]: concatenated(load_task(task(entry))) for entry in train.get("dev", [])}
    weights = {entry["name"]: float(entry.get("weight", 1.0)) for entry in train.get("dev", [])}
    tests = {entry["name"]: concatenated(load_task(task(entry))) for entry in recipe["evaluate"]["tasks"]}
    return base, dev, weights, tests


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--plan", type=Path, required=True)
    parser.add_argument("--pairs", type=Path, required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", type=Path, default=Path("recipes/data"))
    parser.add_argument("--recipe", type=Path, help="dev tasks, selection and evaluation tasks from this recipe")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", nargs="*", help="labels to run (default: all)")
    args = parser.parse_args()
    plan = json.loads(args.plan.read_text())
    if args.recipe:
        base, dev_sets, weights, data = recipe_tasks(yaml.safe_load(args.recipe.read_text()), args.data)
        dev = lambda model: DevResult.of(model_scores(model, dev_sets, batch_size=256), weights)  # noqa: E731
    else:
        base = {}
        data = {
            name: concatenated(load_task(StsTask(name=name, format=fmt, path=args.data / rel)))
            for name, (fmt, rel) in TASKS.items()
        }
        dev = lambda model: spearman_x100(Embedder(model, batch_size=256), data["stsb-dev"])  # noqa: E731
    args.out.mkdir(parents=True, exist_ok=True)
    results = args.out / "results.jsonl"

    def scores(model) -> dict[str, float]:
        if args.recipe:  # as `viewmill run`'s evaluation and dev scoring score
            return {name: round(value, 2) for name, value in model_scores(model, data, batch_size=256).items()}
        embed = Embedder(model, batch_size=256)
        return {name: round(spearman_x100(embed, task), 2) for name, task in data.items()}

    start = scores(load_sentence_model(args.model, device=args.device))
    print(json.dumps({"label": "start", **start}), flush=True)
    with results.open("a") as sink:
        sink.write(json.dumps({"label": "start", "scores": start}) + "\n")
    for entry in plan["configs"]:
        if not args.only or entry["label"] in args.only:
            row = run_configuration(entry, {**base, **plan["base"]}, args, dev, scores)
            print(json.dumps(row), flush=True)
            with results.open("a") as sink:
                sink.write(json.dumps(row) + "\n")


def run_configuration(entry: dict, base: dict, args, dev, scores) -> dict:
    config = TrainConfig(**{**base, **entry.get("set", {}), "device": args.device})
    table = pq.read_table(args.pairs / f"{entry['pairs']}.parquet")
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        report = train_model(
            table, args.model, config, Path(tmp) / "model", card={"label": entry["label"]},
            keys=table["sentence_id"].to_pylist(), dev=dev,
        )  # fmt: skip
        figures = scores(load_sentence_model(str(Path(tmp) / "model"), device=args.device))
    return {
        "label": entry["label"],
        "pairs": entry["pairs"],
        "n_pairs": table.num_rows,
        "set": entry.get("set", {}),
        "scores": figures,
        "best_step": report.best_step,
        "selected_step": report.selected_step,
        "dev_evals": report.dev_evals,
        "dev_task_evals": {
            name: [(step, round(v, 2)) for step, v in evals] for name, evals in report.dev_task_evals.items()
        },
        "seconds": round(time.perf_counter() - began, 1),
    }


if __name__ == "__main__":
    main()
