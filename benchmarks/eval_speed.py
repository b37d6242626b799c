"""Embedding is the cost of evaluation: sentences/s for the full STS-B test + SICK-R test
evaluation of all-MiniLM-L6-v2 on CPU, with viewmill's per-run embedding cache and
without it (every occurrence of a sentence encoded), side by side.

    .venv/bin/python benchmarks/eval_speed.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import torch
from viewmill.train.encoder import load_sentence_model, resolve_encoder
from viewmill.train.evaluation.sts import Embedder, load_sick, load_stsb, spearman_x100

DATA = Path(__file__).resolve().parents[1] / "recipes" / "data"


def main() -> None:
    tasks = {
        "STS-B test": load_stsb(DATA / "stsbenchmark" / "sts-test.csv"),
        "SICK-R test": load_sick(DATA / "sick" / "SICK_test_annotated.txt"),
    }
    texts = [t for data in tasks.values() for t in data.s1 + data.s2]
    model = load_sentence_model(resolve_encoder("embedded:all-MiniLM-L6-v2"))
    print(f"all-MiniLM-L6-v2, CPU ({torch.get_num_threads()} threads): {len(texts)} sentences, "
          f"{len(set(texts))} distinct")  # fmt: skip

    start = time.perf_counter()
    embed = Embedder(model)
    scores = {name: spearman_x100(embed, data) for name, data in tasks.items()}
    cached = time.perf_counter() - start

    def uncached(batch: list[str]) -> np.ndarray:
        return model.encode(batch, batch_size=64, normalize_embeddings=True, convert_to_numpy=True)

    start = time.perf_counter()
    again = {name: spearman_x100(uncached, data) for name, data in tasks.items()}
    plain = time.perf_counter() - start
    # Batches differ (padding), so vectors differ in the last float bits; the figures agree.
    assert all(abs(scores[k] - again[k]) < 0.01 for k in scores), (scores, again)
    print(f"with the cache:    {cached:6.1f} s  {len(texts) / cached:7.1f} sentences/s  {scores}")
    print(f"without the cache: {plain:6.1f} s  {len(texts) / plain:7.1f} sentences/s")
    print(f"speed-up {plain / cached:.2f}x")


if __name__ == "__main__":
    main()
