"""Every objective through the real `train_model` on a GPU: a BERT-base-sized encoder
(random weights, a word-level vocabulary built from the demo corpus), bf16 and fp16
autocast, demo sentences paired with their lower-cased form. Prints pairs/s and peak GPU
memory per objective and precision, and checks that each export loads and embeds.
Step times are medians over the run's steps (the first GPU use of each precision is
warmed up by an untimed run first); "total" adds loading and export.

    python benchmarks/objectives_gpu.py [--steps 30] [--batch 64]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from demo_data import demo_sentences
from viewmill.train.config import OBJECTIVES, TrainConfig
from viewmill.train.encoder import load_sentence_model
from viewmill.train.loop import train_model


def build_bert_base(out: Path, sentences: list[str]) -> Path:
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    from transformers import BertConfig, BertModel, BertTokenizerFast

    words = sorted({w.lower().strip(".,!?\"'") for s in sentences for w in s.split()} - {""})
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words])}
    (out / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tokenizer = BertTokenizerFast(vocab=str(out / "vocab.txt"), do_lower_case=True)
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=len(vocab)), add_pooling_layer=False).save_pretrained(out / "bert")
    tokenizer.save_pretrained(out / "bert")
    transformer = Transformer(str(out / "bert"), max_seq_length=64)
    SentenceTransformer(modules=[transformer, Pooling(768, "mean")]).save(str(out / "st"))
    return out / "st"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--precisions", nargs="*", default=["bf16", "fp16"])
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("no CUDA device: this benchmark needs a GPU")
    sentences = demo_sentences(3000)
    pairs = [(s, s.lower()) for s in sentences]
    print(f"device: {torch.cuda.get_device_name()}; BERT-base (random), {args.batch} pairs/step, {args.steps} steps")
    with tempfile.TemporaryDirectory() as tmp:
        base = build_bert_base(Path(tmp), sentences)
        for precision in args.precisions:
            warm = TrainConfig(objective="ntxent", steps=3, batch_size=args.batch, device="cuda", precision=precision,
                               checkpoint_every=0)  # fmt: skip
            train_model(pairs, str(base), warm, Path(tmp) / f"warm-{precision}", card={})
            for objective in OBJECTIVES:
                warmup = 2 if OBJECTIVES.get(objective).head else 0
                config = TrainConfig(
                    objective=objective, steps=args.steps, batch_size=args.batch, head_warmup_steps=warmup,
                    device="cuda", precision=precision, checkpoint_every=0,
                )  # fmt: skip
                torch.cuda.reset_peak_memory_stats()
                stamps: list[float] = []

                def stamp(step: int, loss: float, stamps: list[float] = stamps) -> None:
                    torch.cuda.synchronize()
                    stamps.append(time.perf_counter())

                start = time.perf_counter()
                out = Path(tmp) / f"{objective}-{precision}"
                report = train_model(pairs, str(base), config, out, card={"recipe": "gpu-bench"}, on_step=stamp)
                total = time.perf_counter() - start
                trained = sorted(b - a for a, b in zip(stamps[warmup:], stamps[warmup + 1 :], strict=False))
                step = trained[len(trained) // 2]
                peak = torch.cuda.max_memory_allocated() / 2**30
                vectors = load_sentence_model(str(out), device="cuda").encode(sentences[:8])
                ok = bool(torch.isfinite(torch.tensor(vectors)).all())
                print(f"{precision} {objective:<8} {1000 * step:6.1f} ms/step {args.batch / step:7.1f} pairs/s  "
                      f"total {total:5.1f} s  peak {peak:5.2f} GiB  loss {report.first_loss:.3f} -> "
                      f"{report.last_loss:.3f}  export loads and embeds: {ok}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
