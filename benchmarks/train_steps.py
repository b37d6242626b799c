"""Training steps timed as `viewmill plan` times them (`viewmill.train.step_timing`), for the
train sections of recipes, on any device: the per-GPU figures of a plan where the rest of the
stack (the lake, the engines) cannot run, e.g. a lent GPU box that has torch alone.

    python benchmarks/train_steps.py --device cuda --model MODEL_DIR \
        --recipe recipes/combined.yaml --recipe recipes/demo.yaml [--random-weights] [--repeats 3]

Pairs are the demo corpus's sentences (view b: the next sentence; hard negatives, where the
recipe's pairs carry them, the sentence after), so token lengths are a real corpus's.
`--random-weights` re-initialises MODEL_DIR's architecture (only its config and tokenizer need
to travel): a step's time does not depend on the weights' values. One JSON line per recipe,
precision and repeat: load, step and export seconds, pairs/s, peak RSS and GPU memory.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from demo_data import demo_sentences
from viewmill.train.config import TrainConfig
from viewmill.train.step_timing import time_training


def train_fields(recipe: dict) -> dict:
    """A recipe's train settings that TrainConfig takes (the encoder is given apart; dev tasks
    are the recipe schema's, not TrainConfig's)."""
    return {k: v for k, v in recipe["train"].items() if k in TrainConfig.model_fields and k != "encoder"}


def recipe_training(path: Path) -> tuple[TrainConfig, int]:
    """The recipe's train section as a TrainConfig and the hard negatives per pair its pairs carry."""
    recipe = yaml.safe_load(path.read_text())
    negatives = (recipe.get("pair") or {}).get("negatives") or {}
    return TrainConfig(**train_fields(recipe)), int(negatives.get("per_anchor", 0)) if negatives else 0


def demo_pairs(count: int, negatives: int) -> pa.Table:
    texts = demo_sentences(count + 1 + negatives)
    columns = {
        "sentence_id": [f"{i:016x}" for i in range(count)],
        "text_a": texts[:count],
        "text_b": texts[1 : count + 1],
    }
    if negatives:
        columns["negatives"] = [texts[i + 2 : i + 2 + negatives] for i in range(count)]
    return pa.table(columns)


def randomised(model_dir: Path, out: Path) -> Path:
    """MODEL_DIR's sentence-transformers folder with the transformer's weights drawn anew."""
    import torch
    from transformers import AutoConfig, AutoModel

    torch.manual_seed(0)
    shutil.copytree(model_dir, out, ignore=shutil.ignore_patterns("*.safetensors", "*.bin"))
    AutoModel.from_config(AutoConfig.from_pretrained(out)).save_pretrained(out)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--recipe", type=Path, action="append", required=True)
    parser.add_argument("--precision", default="fp32", help="comma-separated: fp32,bf16,fp16")
    parser.add_argument("--random-weights", action="store_true")
    parser.add_argument("--steps", type=int, default=10, help="timed steps after one warm-up step")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = randomised(args.model, Path(tmp) / "model") if args.random_weights else args.model
        for recipe in args.recipe:
            config, negatives = recipe_training(recipe)
            pairs = demo_pairs(config.batch_size * (args.steps + 1), negatives)
            for precision in args.precision.split(","):
                steps = []
                for repeat in range(args.repeats):
                    run = config.model_copy(update={"precision": precision})
                    found = time_training(run, str(model), pairs, args.device, Path(tmp) / "out", {}, args.steps)
                    steps.append(found.step_s)
                    print(json.dumps({
                        "recipe": recipe.name, "device": args.device, "precision": precision, "repeat": repeat,
                        "objective": config.objective, "batch_size": config.batch_size, "negatives": negatives,
                        "load_s": round(found.load_s, 3), "step_s": round(found.step_s, 4),
                        "pairs_per_s": round(config.batch_size / found.step_s, 1), "export_s": round(found.export_s, 3),
                        "peak_rss_mib": found.peak_rss // 2**20,
                        "peak_gpu_mib": None if found.peak_gpu is None else found.peak_gpu // 2**20,
                    }), flush=True)  # fmt: skip
                print(f"{recipe.name} {precision} on {args.device}: step min {min(steps):.4f} median "
                      f"{statistics.median(steps):.4f} max {max(steps):.4f} s", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
