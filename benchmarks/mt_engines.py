"""`hf` (transformers, float32) versus `ctranslate2` (int8) on CPU, side by side, for a
random-weight Marian model with opus-mt-en-de's dimensions.

Both decode exactly the same number of tokens (min and max length pinned), beam 4, on
the same inputs: the demo corpus's first sentences through a SentencePiece vocabulary
padded to opus-mt-en-de's 58,101 entries.

    .venv/bin/python benchmarks/mt_engines.py [--sentences 64] [--tokens 24] [--batch 16]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from augment.neural import convert_to_ct2, model_revision
from pipelines.recipe import load_recipe
from pipelines.stages import RunContext, _read_corpus
from pipelines.state import StatePaths

OPUS_MT_EN_DE = {"d_model": 512, "layers": 6, "heads": 8, "ffn": 2048, "vocab": 58101}


def build_marian(out: Path, corpus: list[str]) -> Path:
    import sentencepiece as spm
    import torch
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    torch.manual_seed(0)
    (out / "train.txt").write_text("\n".join(corpus), encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(out / "train.txt"), model_prefix=str(out / "spm"), vocab_size=2000, bos_id=-1, eos_id=-1,
        pad_id=-1, unk_id=0, minloglevel=2,
    )  # fmt: skip
    for name in ("source.spm", "target.spm"):
        (out / name).write_bytes((out / "spm.model").read_bytes())
    processor = spm.SentencePieceProcessor(model_file=str(out / "spm.model"))
    vocab = {"</s>": 0, "<unk>": 1}
    for i in range(processor.get_piece_size()):
        vocab.setdefault(processor.id_to_piece(i), len(vocab))
    while len(vocab) < OPUS_MT_EN_DE["vocab"] - 1:  # opus-mt-en-de's vocabulary size
        vocab[f"<extra_{len(vocab)}>"] = len(vocab)
    vocab["<pad>"] = len(vocab)
    (out / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    tokenizer = MarianTokenizer(str(out / "source.spm"), str(out / "target.spm"), str(out / "vocab.json"))
    d = OPUS_MT_EN_DE
    config = MarianConfig(
        vocab_size=len(vocab), d_model=d["d_model"], encoder_layers=d["layers"], decoder_layers=d["layers"],
        encoder_attention_heads=d["heads"], decoder_attention_heads=d["heads"], encoder_ffn_dim=d["ffn"],
        decoder_ffn_dim=d["ffn"], pad_token_id=vocab["<pad>"], eos_token_id=0, decoder_start_token_id=vocab["<pad>"],
        max_position_embeddings=512,
    )  # fmt: skip
    MarianMTModel(config).eval().save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def main() -> None:
    import ctranslate2
    import torch
    from transformers import AutoTokenizer, MarianMTModel

    parser = argparse.ArgumentParser()
    parser.add_argument("--sentences", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=24)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args()
    table, _ = _read_corpus(RunContext(load_recipe("recipes/demo.yaml"), StatePaths(Path("/nonexistent"))))
    texts = table["text"].to_pylist()[: args.sentences]
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_marian(Path(tmp), table["text"].to_pylist())
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        model = MarianMTModel.from_pretrained(model_dir).eval()
        ct2_dir = convert_to_ct2(str(model_dir), model_revision(str(model_dir), model.config), "marian")
        translator = ctranslate2.Translator(str(ct2_dir), device="cpu", compute_type="int8", intra_threads=2)
        batches = [texts[i : i + args.batch] for i in range(0, len(texts), args.batch)]
        n = args.tokens

        start = time.perf_counter()
        for batch in batches:
            encoded = tokenizer(batch, return_tensors="pt", padding=True)
            with torch.inference_mode():
                out = model.generate(**encoded, num_beams=4, min_new_tokens=n, max_new_tokens=n)
            assert out.shape[1] == n + 1
        hf_s = time.perf_counter() - start

        start = time.perf_counter()
        for batch in batches:
            tokens = [tokenizer.convert_ids_to_tokens(tokenizer(t)["input_ids"]) for t in batch]
            results = translator.translate_batch(
                tokens, beam_size=4, min_decoding_length=n, max_decoding_length=n, suppress_sequences=None
            )
            assert all(len(r.hypotheses[0]) == n for r in results)
        ct2_s = time.perf_counter() - start
    print(f"Marian {OPUS_MT_EN_DE}, beam 4, {len(texts)} sentences in batches of {args.batch}, {n} tokens each")
    print(f"hf float32:       {hf_s:6.1f} s  {len(texts) / hf_s:6.1f} sentences/s")
    print(f"ctranslate2 int8: {ct2_s:6.1f} s  {len(texts) / ct2_s:6.1f} sentences/s")
    print(f"ctranslate2 / hf speed-up: {hf_s / ct2_s:.2f}x")


if __name__ == "__main__":
    main()
