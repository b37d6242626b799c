"""BSL training throughput on a BERT-base-sized encoder: fp32 against bf16 (and fp16) autocast.

Random weights (no hub), batches of `--batch` pairs whose token lengths follow the demo
corpus's sentences, the real training step (`viewmill.train.optimisation.train_step`: online and target
encoders, predictor, Adam, EMA update). Prints pairs/s, peak GPU memory and the EMA
update's share of a step, side by side in one run.

    python benchmarks/bsl_precision.py [--device cuda] [--batch 64] [--steps 30]
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import torch
from viewmill.train.bsl import BSL
from viewmill.train.loop import seed_everything
from viewmill.train.optimisation import train_step

ROOT = Path(__file__).resolve().parents[1]
BERT_BASE = {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072}


def demo_lengths() -> list[int]:
    """Whitespace word counts of the demo corpus's sentences, x1.3 for word pieces, plus [CLS]/[SEP]."""
    lines = (ROOT / "recipes" / "data" / "snli" / "s1.dev").read_text(encoding="utf-8").splitlines()
    return [min(64, int(len(line.split()) * 1.3) + 2) for line in lines if line.strip()]


def make_batches(lengths: list[int], batch: int, steps: int, vocab: int, device: str) -> list[dict]:
    rng = np.random.default_rng(0)
    out = []
    for _ in range(steps):
        width = np.array(rng.choice(lengths, size=2 * batch))
        ids = rng.integers(1000, vocab, size=(2 * batch, int(width.max())))
        mask = (np.arange(width.max())[None, :] < width[:, None]).astype(np.int64)
        out.append({
            "input_ids": torch.tensor(ids * mask, device=device),
            "attention_mask": torch.tensor(mask, device=device),
        })  # fmt: skip
    return out


def measure(precision: str, args, batches: list[dict]) -> dict:
    from transformers import BertConfig, BertModel

    seed_everything(0)
    device = args.device
    encoder = BertModel(BertConfig(**BERT_BASE), add_pooling_layer=False)
    model = BSL(encoder, BERT_BASE["hidden_size"], k=8).to(device).train()
    optimizer = torch.optim.Adam(
        [{"params": list(model.online.parameters()), "lr": 1e-5},
         {"params": list(model.predictor.parameters()), "lr": 1e-3}]
    )  # fmt: skip
    scaler = torch.amp.GradScaler(device) if precision == "fp16" else None
    ema = functools.partial(model.update_target, 0.999)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for batch in batches[: args.warmup]:
        train_step(model, optimizer, batch, args.batch, train_encoder=True, precision=precision, scaler=scaler,
                   after_step=ema)  # fmt: skip
    sync()
    start = time.perf_counter()
    for batch in batches[args.warmup :]:
        train_step(model, optimizer, batch, args.batch, train_encoder=True, precision=precision, scaler=scaler,
                   after_step=ema)  # fmt: skip
    sync()
    step_s = (time.perf_counter() - start) / (len(batches) - args.warmup)
    start = time.perf_counter()
    for _ in range(20):
        model.update_target(0.999)
    sync()
    ema_s = (time.perf_counter() - start) / 20
    peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else float("nan")
    del model, optimizer
    if device == "cuda":
        torch.cuda.empty_cache()
    return {"step_s": step_s, "pairs_s": args.batch / step_s, "peak_gib": peak, "ema_share": ema_s / step_s}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch", type=int, default=64, help="pairs per step (2x sequences)")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--precisions", default="fp32,bf16,fp16")
    args = parser.parse_args()
    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32
        name = torch.cuda.get_device_name()
    else:
        name = f"CPU, {torch.get_num_threads()} threads"
    batches = make_batches(demo_lengths(), args.batch, args.steps + args.warmup, 30522, args.device)
    print(f"device: {name}; BERT-base {BERT_BASE}, BSL (predictor k=8), {args.batch} pairs/step, "
          f"{args.steps} timed steps after {args.warmup} warm-up")  # fmt: skip
    results = {p: measure(p, args, batches) for p in args.precisions.split(",")}
    for precision, r in results.items():
        print(f"{precision}: {r['step_s'] * 1000:7.1f} ms/step  {r['pairs_s']:7.1f} pairs/s  "
              f"peak {r['peak_gib']:5.2f} GiB  EMA {100 * r['ema_share']:4.1f}% of a step")  # fmt: skip
    base = results.get("fp32")
    for precision, r in results.items():
        if base and precision != "fp32":
            print(f"{precision} / fp32: {r['pairs_s'] / base['pairs_s']:.2f}x pairs/s, "
                  f"{r['peak_gib'] / base['peak_gib']:.2f}x peak memory")  # fmt: skip


if __name__ == "__main__":
    main()
