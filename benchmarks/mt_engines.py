"""`hf` (transformers, float32) versus `ctranslate2` (int8) on CPU, side by side, for a
random-weight Marian model with opus-mt-en-de's dimensions.

Both decode exactly the same number of tokens (min and max length pinned), beam 4, on
the same inputs: the demo corpus's first sentences through a SentencePiece vocabulary
padded to opus-mt-en-de's 58,101 entries.

    .venv/bin/python benchmarks/mt_engines.py [--sentences 64] [--tokens 24] [--batch 16]

With `--device cuda`: hf float32/float16/bfloat16 against ctranslate2 float16/bfloat16/
int8_float16 on 1,024 sentences, then sentences/s per batch size for the fastest of each.

With `--ragged`: the demo corpus's real sentences (their own length distribution, output
lengths not pinned: each decodes until EOS or its max_length_ratio), through viewmill's
own engines (`HFEngine` float32, `CT2Engine` int8 on CPU and float16 on GPU: length-sorted
batches packed to a token budget, or of `--batch-sentences` sentences each, outputs in input
order), greedy and beam 4, `--runs` times each, reporting min/median/max seconds and the
ct2/hf speed-up per run. `--dims wmt19` builds the random model at WMT'19 en-de's size.

    .venv/bin/python benchmarks/mt_engines.py --ragged [--sentences 1000] [--runs 3]
    python benchmarks/mt_engines.py --ragged --device cuda --batch-sentences 64 --dims wmt19

With `--bergamot`: en>pt>en round trips of the demo's first sentences (default 400) through
the bergamot engine on 1 and 2 threads, `--runs` times: wall and CPU seconds, round trips
identical to the source, peak memory (a leak would show as growth across runs).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from demo_data import demo_sentences
from viewmill.augment.ctranslate2_engine import convert_to_ct2
from viewmill.augment.neural import model_revision

OPUS_MT_EN_DE = {"d_model": 512, "layers": 6, "heads": 8, "ffn": 2048, "vocab": 58101}
# fairseq's WMT'19 en-de (transformer big, as facebook/wmt19-en-de converts): the mission's model.
WMT19_EN_DE = {"d_model": 1024, "layers": 6, "heads": 16, "ffn": 8192, "vocab": 42024}
DIMS = {"opus-mt": OPUS_MT_EN_DE, "wmt19": WMT19_EN_DE}


def build_marian(out: Path, corpus: list[str], dims: dict[str, int] = OPUS_MT_EN_DE) -> Path:
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
    while len(vocab) < dims["vocab"] - 1:  # the modelled system's vocabulary size
        vocab[f"<extra_{len(vocab)}>"] = len(vocab)
    vocab["<pad>"] = len(vocab)
    (out / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    tokenizer = MarianTokenizer(str(out / "source.spm"), str(out / "target.spm"), str(out / "vocab.json"))
    d = dims
    config = MarianConfig(
        vocab_size=len(vocab), d_model=d["d_model"], encoder_layers=d["layers"], decoder_layers=d["layers"],
        encoder_attention_heads=d["heads"], decoder_attention_heads=d["heads"], encoder_ffn_dim=d["ffn"],
        decoder_ffn_dim=d["ffn"], pad_token_id=vocab["<pad>"], eos_token_id=0, decoder_start_token_id=vocab["<pad>"],
        max_position_embeddings=512,
    )  # fmt: skip
    MarianMTModel(config).eval().save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def time_hf(model, tokenizer, batches: list[list[str]], n: int, device: str) -> float:
    import torch

    def run() -> None:
        for batch in batches:
            encoded = tokenizer(batch, return_tensors="pt", padding=True).to(device)
            with torch.inference_mode():
                out = model.generate(**encoded, num_beams=4, min_new_tokens=n, max_new_tokens=n)
            assert out.shape[1] == n + 1

    return _timed(run, device)


def time_ct2(translator, tokenizer, batches: list[list[str]], n: int, device: str) -> float:
    tokenized = [[tokenizer.convert_ids_to_tokens(tokenizer(t)["input_ids"]) for t in batch] for batch in batches]

    def run() -> None:
        for tokens in tokenized:
            results = translator.translate_batch(
                tokens, beam_size=4, min_decoding_length=n, max_decoding_length=n, suppress_sequences=None,
                max_batch_size=len(tokens),
            )  # fmt: skip
            assert all(len(r.hypotheses[0]) == n for r in results)

    return _timed(run, device)


def _timed(run, device: str) -> float:
    import torch

    if device == "cuda":  # one untimed pass: kernels compiled, allocator warm
        run()
        torch.cuda.synchronize()
    start = time.perf_counter()
    run()
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def ragged(args, model_dir: Path) -> None:
    """hf float32 against ctranslate2 (int8 on CPU, float16 on GPU) through viewmill's engines,
    on unpinned lengths."""
    import statistics

    import torch
    from viewmill.augment.ctranslate2_engine import CT2Engine
    from viewmill.augment.engines import DecodingSpec
    from viewmill.augment.neural import HFEngine

    texts = demo_sentences(args.sentences or 1000)
    device, ct2_type = args.device, ("int8" if args.device == "cpu" else "float16")
    # --batch-sentences N: length-sorted chunks of N sentences, each one engine call and one
    # batch (the token budget lifted); otherwise the engines' own token-budget packing.
    budget = 10**9 if args.batch_sentences else args.budget
    engines = {
        f"hf {dtype}": HFEngine(str(model_dir), "en", "de", device=device, compute_type=dtype, max_batch_tokens=budget)
        for dtype in filter(None, args.hf_types.split(","))
    }
    engines[f"ctranslate2 {ct2_type}"] = CT2Engine(
        str(model_dir), "en", "de", device=device, compute_type=ct2_type, max_batch_tokens=budget
    )
    lengths = [len(engines[f"ctranslate2 {ct2_type}"].tokenizer(t)["input_ids"]) for t in texts]
    _describe(device, texts, lengths)
    for engine in engines.values():  # conversion and loading, untimed
        engine.translate(texts[:8], "en", "de", DecodingSpec())
    for beam in (int(b) for b in args.beams.split(",")):
        chunks = _chunks(texts, lengths, args.batch_sentences, budget, beam)
        decoding = DecodingSpec(beam_size=beam, max_length_ratio=args.max_length_ratio)
        runs: dict[str, list[float]] = {label: [] for label in engines}
        for _ in range(args.runs):
            for label, engine in engines.items():
                start = time.perf_counter()
                out = [h for chunk in chunks for h in engine.translate(chunk, "en", "de", decoding)]
                runs[label].append(time.perf_counter() - start)
                assert len(out) == len(texts) and all(len(h) == 1 for h in out)
                print(f"beam {beam} {label:<20} {runs[label][-1]:7.2f} s  {len(texts) / runs[label][-1]:7.1f} "
                      "sentences/s", flush=True)  # fmt: skip
        for label, seconds in runs.items():
            print(f"beam {beam} {label}: min {min(seconds):.2f} median {statistics.median(seconds):.2f} "
                  f"max {max(seconds):.2f} s")  # fmt: skip
        ct2_label = f"ctranslate2 {ct2_type}"
        for label in runs:
            if label != ct2_label:
                ratios = [h / c for h, c in zip(runs[label], runs[ct2_label], strict=True)]
                print(f"beam {beam} speed-up {ct2_label} / {label} per run: min {min(ratios):.2f}x "
                      f"median {statistics.median(ratios):.2f}x max {max(ratios):.2f}x")  # fmt: skip
    if device == "cuda":
        print(f"peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB (torch's allocator: hf)")


def _chunks(texts: list[str], lengths: list[int], size: int, budget: int, beam: int) -> list[list[str]]:
    """What each engine call gets: length-sorted chunks of `size` sentences, or every text at once."""
    from viewmill.augment.neural import length_batches

    if size:
        order = sorted(range(len(texts)), key=lambda i: lengths[i])
        chunks = [[texts[i] for i in order[j : j + size]] for j in range(0, len(order), size)]
        print(f"beam {beam}: {len(chunks)} length-sorted batches of {size} sentences")
        return chunks
    batches = len(length_batches(lengths, budget, beam))
    print(f"beam {beam}: {batches} length-sorted batches of <= {budget} source tokens x beam")
    return [texts]


def _describe(device: str, texts: list[str], lengths: list[int]) -> None:
    import statistics

    import torch

    if device == "cuda":
        import ctranslate2

        print(
            f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}, ctranslate2 {ctranslate2.__version__}"
        )
    else:
        from viewmill.cpu import apply_ct2_isa, flags_label

        isa = apply_ct2_isa()
        print(f"CPU flags: {flags_label()}; CTranslate2 ISA: {isa.isa or 'its default'} ({isa.reason})")
        print(f"CPU, {torch.get_num_threads()} threads")
    print(f"{len(texts)} demo sentences, source tokens min {min(lengths)} median {statistics.median(lengths)} "
          f"max {max(lengths)}")  # fmt: skip


def bergamot(args) -> None:
    import os
    import resource

    from viewmill.augment.bergamot import BergamotEngine
    from viewmill.augment.engines import DecodingSpec

    texts, spec = demo_sentences(args.sentences or 400), DecodingSpec()
    for run in range(args.runs):
        for threads in (1, 2):
            there, back = BergamotEngine("en", "pt", threads), BergamotEngine("pt", "en", threads)
            there.translate(texts[:1], "en", "pt", spec), back.translate(["Olá."], "pt", "en", spec)  # load
            wall, cpu = time.perf_counter(), time.process_time()
            pt = [h[0] for h in there.translate(texts, "en", "pt", spec)]
            en = [h[0] for h in back.translate(pt, "pt", "en", spec)]
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            same = sum(a == b for a, b in zip(texts, en, strict=True))
            print(f"run {run + 1} threads {threads}: {len(texts)} round trips {wall:6.1f} s "
                  f"({len(texts) / wall:5.1f}/s) {cpu:6.1f} CPU-s ({len(texts) / cpu:5.1f}/CPU-s) identical {same} "
                  f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MB "
                  f"load {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip


def cut(texts: list[str], size: int) -> list[list[str]]:
    return [texts[i : i + size] for i in range(0, len(texts), size)]


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--sentences", type=int, default=None, help="default: 64 on CPU, 1024 on GPU")
    parser.add_argument("--tokens", type=int, default=24)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--sweep", default="16,32,64,128,256", help="GPU: batch sizes for sentences/s")
    parser.add_argument("--ragged", action="store_true", help="real sentence lengths through viewmill's engines")
    parser.add_argument("--runs", type=int, default=3, help="--ragged: repeats of each engine and beam")
    parser.add_argument("--beams", default="1,4", help="--ragged: beam sizes, comma-separated")
    parser.add_argument("--budget", type=int, default=4096, help="--ragged: source tokens x beam per batch")
    parser.add_argument("--max-length-ratio", type=float, default=1.5, help="--ragged: output tokens per source token")
    parser.add_argument("--hf-types", default="float32", help="--ragged: transformers dtypes ('': none)")
    parser.add_argument("--batch-sentences", type=int, default=0, help="--ragged: length-sorted batches of N sentences")
    parser.add_argument("--dims", choices=sorted(DIMS), default="opus-mt", help="--ragged: the random model's size")
    parser.add_argument("--bergamot", action="store_true", help="en>pt>en round trips through the bergamot engine")
    return parser.parse_args()


def main() -> None:
    import ctranslate2
    import torch
    from transformers import AutoTokenizer, MarianMTModel

    args = _arguments()
    if args.bergamot:
        return bergamot(args)
    if args.ragged:
        with tempfile.TemporaryDirectory() as tmp:
            ragged(args, build_marian(Path(tmp), demo_sentences(3000), DIMS[args.dims]))
        return
    device = args.device
    n_sentences = args.sentences or (64 if device == "cpu" else 1024)
    texts = demo_sentences(n_sentences)
    n = args.tokens
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_marian(Path(tmp), demo_sentences(3000))
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        revision = model_revision(str(model_dir), MarianMTModel.from_pretrained(model_dir).config)
        ct2_dir = convert_to_ct2(str(model_dir), revision, "marian")
        if device == "cpu":
            hf_types, ct2_types = ["float32"], ["int8"]
        else:
            hf_types, ct2_types = ["float32", "float16", "bfloat16"], ["float16", "bfloat16", "int8_float16"]
        name = torch.cuda.get_device_name() if device == "cuda" else f"CPU, {torch.get_num_threads()} threads"
        print(f"device: {name}")
        print(f"Marian {OPUS_MT_EN_DE}, beam 4, {len(texts)} sentences in batches of {args.batch}, {n} tokens each")
        timings: dict[str, float] = {}
        for dtype in hf_types:
            model = MarianMTModel.from_pretrained(model_dir, dtype=getattr(torch, dtype)).to(device).eval()
            timings[f"hf {dtype}"] = time_hf(model, tokenizer, cut(texts, args.batch), n, device)
            del model
        for dtype in ct2_types:
            try:
                translator = ctranslate2.Translator(
                    str(ct2_dir), device=device, compute_type=dtype, intra_threads=torch.get_num_threads()
                )
                timings[f"ctranslate2 {dtype}"] = time_ct2(translator, tokenizer, cut(texts, args.batch), n, device)
                del translator
            except (RuntimeError, ValueError) as exc:
                print(f"ctranslate2 {dtype}: cannot run on {device}: {exc}")
        for label, seconds in timings.items():
            print(f"{label:<26} {seconds:7.2f} s  {len(texts) / seconds:8.1f} sentences/s")
        baseline = timings["hf float32"]
        for label, seconds in timings.items():
            if label != "hf float32":
                print(f"{label} / hf float32 speed-up: {baseline / seconds:.2f}x")
        if device == "cuda":
            sweep(args, texts, n, model_dir, ct2_dir, tokenizer, timings)


def sweep(args, texts, n, model_dir, ct2_dir, tokenizer, timings) -> None:
    """sentences/s per batch size for the fastest hf and ctranslate2 settings."""
    import ctranslate2
    import torch
    from transformers import MarianMTModel

    best_hf = min((k for k in timings if k.startswith("hf")), key=timings.get)
    best_ct2 = min((k for k in timings if k.startswith("ctranslate2")), key=timings.get, default=None)
    print(f"batch-size sweep ({len(texts)} sentences, beam 4, {n} tokens): sentences/s")
    model = MarianMTModel.from_pretrained(model_dir, dtype=getattr(torch, best_hf.split()[1])).to("cuda").eval()
    translator = None
    if best_ct2:
        translator = ctranslate2.Translator(str(ct2_dir), device="cuda", compute_type=best_ct2.split()[1])
    for size in (int(x) for x in args.sweep.split(",")):
        hf_rate = len(texts) / time_hf(model, tokenizer, cut(texts, size), n, "cuda")
        line = f"batch {size:>4}: {best_hf} {hf_rate:8.1f}"
        if translator is not None:
            ct2_rate = len(texts) / time_ct2(translator, tokenizer, cut(texts, size), n, "cuda")
            line += f" | {best_ct2} {ct2_rate:8.1f}"
        print(line, flush=True)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
