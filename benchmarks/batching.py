"""BSL step time with random batches versus length-grouped batches, side by side.

Same encoder (all-MiniLM-L6-v2), same pairs (the demo snapshot's texts are rebuilt from
the vendored SNLI slice with an identity view), same number of steps, CPU.

    .venv/bin/python benchmarks/batching.py [--steps 20]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from viewmill.pipelines.context import RunContext
from viewmill.pipelines.recipe import load_recipe
from viewmill.pipelines.state import StatePaths
from viewmill.train.batches import batches
from viewmill.train.bsl import BSL
from viewmill.train.encoder import load_sentence_model, resolve_encoder


def time_steps(texts: list[str], index_batches: list[list[int]], max_length: int) -> tuple[float, float]:
    torch.manual_seed(0)
    model = load_sentence_model(resolve_encoder("embedded:all-MiniLM-L6-v2"))
    bsl = BSL(model[0].auto_model, model.get_embedding_dimension(), 8)
    bsl.train()
    optimizer = torch.optim.Adam(bsl.parameters(), lr=1e-5)
    pad_share, start = [], time.perf_counter()
    for index in index_batches:
        batch = model.tokenizer(
            [texts[i] for i in index] * 2, padding=True, truncation=True, max_length=max_length, return_tensors="pt"
        )
        pad_share.append(1 - float(batch["attention_mask"].float().mean()))
        optimizer.zero_grad()
        bsl.loss(dict(batch), len(index)).backward()
        optimizer.step()
        bsl.update_target(0.999)
    return (time.perf_counter() - start) / len(index_batches), float(np.mean(pad_share))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    recipe = load_recipe("recipes/demo.yaml")
    table = RunContext(recipe, StatePaths(Path("/nonexistent"))).corpus().sentences
    texts = table["text"].to_pylist()
    rng = np.random.default_rng(13)
    random_batches = [rng.permutation(len(texts))[:64].tolist() for _ in range(args.steps)]
    grouped = batches([len(t) for t in texts], 64, args.steps, seed=13)
    random_s, random_pad = time_steps(texts, random_batches, 64)
    grouped_s, grouped_pad = time_steps(texts, grouped, 64)
    print(f"random batches:        {random_s:.2f} s/step, padding {random_pad:.0%} of tokens")
    print(f"length-grouped batches: {grouped_s:.2f} s/step, padding {grouped_pad:.0%} of tokens")
    print(f"speed-up: {random_s / grouped_s:.2f}x over {args.steps} steps each")


if __name__ == "__main__":
    main()
