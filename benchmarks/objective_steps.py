"""Step time of every objective on one encoder and one batch stream, side by side, and the
EMA update's share of a BSL step.

all-MiniLM-L6-v2 (the embedded default) on CPU, batches of 64 demo-corpus sentences
paired with their lower-cased form (step time depends on shapes, not on content), max
length 64, the real `viewmill.train.optimisation.train_step`.

    .venv/bin/python benchmarks/objective_steps.py [--steps 10] [--batch 64]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
from viewmill.pipelines.context import RunContext
from viewmill.pipelines.recipe import load_recipe
from viewmill.pipelines.state import StatePaths
from viewmill.train.assembly import build_objective
from viewmill.train.bsl import BSL
from viewmill.train.config import OBJECTIVES, TrainConfig
from viewmill.train.encoder import load_sentence_model, resolve_encoder
from viewmill.train.loop import seed_everything
from viewmill.train.optimisation import make_optimizer, train_step


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--objectives", nargs="*", default=list(OBJECTIVES))
    args = parser.parse_args()
    texts = RunContext(load_recipe("recipes/demo.yaml"), StatePaths(Path("/nonexistent"))).corpus().sentences
    texts = texts["text"].to_pylist()
    encoder_path = resolve_encoder("embedded:all-MiniLM-L6-v2")
    tokenizer = load_sentence_model(encoder_path).tokenizer
    batches = []
    for i in range(args.warmup + args.steps):
        chunk = texts[i * args.batch : (i + 1) * args.batch]
        batches.append(tokenizer(chunk + [t.lower() for t in chunk], padding=True, truncation=True, max_length=64,
                                 return_tensors="pt"))  # fmt: skip
    print(f"all-MiniLM-L6-v2, CPU ({torch.get_num_threads()} threads), {args.batch} pairs/step, "
          f"median of {args.steps} steps after {args.warmup} warm-up")  # fmt: skip
    results = {}
    for name in args.objectives:
        seed_everything(0)
        config = TrainConfig(objective=name, head_warmup_steps=0, steps=2)
        objective, _ = build_objective(config, load_sentence_model(encoder_path))
        objective.train()
        optimizer = make_optimizer(config, objective)
        after = (lambda o=objective: o.update_target(0.999)) if isinstance(objective, BSL) else None
        times = []
        for step, batch in enumerate(batches):
            start = time.perf_counter()
            train_step(objective, optimizer, dict(batch), args.batch, train_encoder=True, after_step=after)
            if step >= args.warmup:
                times.append(time.perf_counter() - start)
        results[name] = statistics.median(times)
        line = f"{name:<8} {1000 * results[name]:8.1f} ms/step  {args.batch / results[name]:6.1f} pairs/s"
        if isinstance(objective, BSL):
            ema = []
            for _ in range(20):
                start = time.perf_counter()
                objective.update_target(0.999)
                ema.append(time.perf_counter() - start)
            line += f"  (EMA update {1000 * statistics.median(ema):.1f} ms = "
            line += f"{100 * statistics.median(ema) / results[name]:.1f}% of a step)"
        print(line, flush=True)
    if "bsl" in results and "ntxent" in results:
        print(f"BSL / NT-Xent step time: {results['bsl'] / results['ntxent']:.2f}x")


if __name__ == "__main__":
    main()
