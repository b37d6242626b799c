"""viewmill's training step against the peer a user would pick instead:
sentence-transformers' SentenceTransformerTrainer with MultipleNegativesRankingLoss.

Same model (all-MiniLM-L6-v2), same pairs (demo-corpus sentences with their lower-cased
form), batch 64, max length 64, CPU. Rounds alternate viewmill NT-Xent, InfoNCE, BSL and
the ST trainer, so drift on this shared machine hits every contender alike; each round
reports median step times, the summary min/median/max of the per-round ratios to the
peer. Timing covers the optimiser step only: tokenisation happens before it on both sides
(viewmill pre-tokenises; the trainer's collator runs before `on_step_begin`).

    (the trainer needs accelerate: the [bench] extra, in the quick start's [all])
    .venv/bin/python benchmarks/st_trainer_peer.py [--rounds 3] [--steps 8] [--warmup 2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from demo_data import demo_sentences
from viewmill.train.assembly import build_objective
from viewmill.train.bsl import BSL
from viewmill.train.config import TrainConfig
from viewmill.train.encoder import load_sentence_model, resolve_encoder
from viewmill.train.loop import seed_everything
from viewmill.train.optimisation import make_optimizer, train_step

MAX_LENGTH = 64


def viewmill_steps(name: str, encoder: str, pairs: list[tuple[str, str]], batch: int, warmup: int) -> list[float]:
    """Per-step seconds of viewmill's own loop step, after `warmup` steps."""
    seed_everything(0)
    config = TrainConfig(objective=name, head_warmup_steps=0, steps=2)
    model = load_sentence_model(encoder)
    objective, _ = build_objective(config, model)
    objective.train()
    optimizer = make_optimizer(config, objective)
    after = (lambda: objective.update_target(0.999)) if isinstance(objective, BSL) else None
    times = []
    for step in range(len(pairs) // batch):
        chunk = pairs[step * batch : (step + 1) * batch]
        texts = [a for a, _ in chunk] + [b for _, b in chunk]
        tokens = model.tokenizer(texts, padding=True, truncation=True, max_length=MAX_LENGTH, return_tensors="pt")
        start = time.perf_counter()
        train_step(objective, optimizer, dict(tokens), batch, train_encoder=True, after_step=after)
        if step >= warmup:
            times.append(time.perf_counter() - start)
    return times


def trainer_steps(encoder: str, pairs: list[tuple[str, str]], batch: int, warmup: int) -> list[float]:
    """Per-step seconds of SentenceTransformerTrainer + MultipleNegativesRankingLoss."""
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
    from sentence_transformers.losses import MultipleNegativesRankingLoss
    from sentence_transformers.training_args import SentenceTransformerTrainingArguments
    from transformers import TrainerCallback

    times: list[float] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step > warmup:
                times.append(time.perf_counter() - self.start)

    model = SentenceTransformer(encoder, device="cpu")
    model.max_seq_length = MAX_LENGTH
    data = Dataset.from_dict({"anchor": [a for a, _ in pairs], "positive": [b for _, b in pairs]})
    with tempfile.TemporaryDirectory() as out:
        args = SentenceTransformerTrainingArguments(
            output_dir=out, per_device_train_batch_size=batch, max_steps=len(pairs) // batch, learning_rate=1e-5,
            report_to=[], save_strategy="no", logging_strategy="no", use_cpu=True, seed=0, dataloader_drop_last=True,
        )  # fmt: skip
        loss = MultipleNegativesRankingLoss(model)
        timer = StepTimer()
        trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=data, loss=loss, callbacks=[timer])
        trainer.train()
    return times


def summary(label: str, ratios: list[float]) -> str:
    return f"{label}: min {min(ratios):.2f}x  median {statistics.median(ratios):.2f}x  max {max(ratios):.2f}x"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    torch.set_num_threads(2)
    texts = demo_sentences((args.steps + args.warmup) * args.batch)
    pairs = [(text, text.lower()) for text in texts]
    encoder = resolve_encoder("embedded:all-MiniLM-L6-v2")
    print(f"all-MiniLM-L6-v2, CPU ({torch.get_num_threads()} threads), batch {args.batch}, max length {MAX_LENGTH}, "
          f"{args.steps} timed steps after {args.warmup} warm-up, {args.rounds} alternating rounds")  # fmt: skip
    ratios: dict[str, list[float]] = {"ntxent": [], "infonce": [], "bsl": []}
    for round_ in range(1, args.rounds + 1):
        medians = {name: statistics.median(viewmill_steps(name, encoder, pairs, args.batch, args.warmup))
                   for name in ratios}  # fmt: skip
        medians["st-mnrl"] = statistics.median(trainer_steps(encoder, pairs, args.batch, args.warmup))
        for name in ratios:
            ratios[name].append(medians[name] / medians["st-mnrl"])
        print(f"round {round_}: " + "  ".join(f"{n} {1000 * s:.0f} ms" for n, s in medians.items()), flush=True)
    for name, values in ratios.items():
        print(summary(f"viewmill {name} / ST trainer MNRL step", values))


if __name__ == "__main__":
    main()
