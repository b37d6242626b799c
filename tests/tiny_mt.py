"""Tiny random-weight translation models of the real architectures, built locally.

FSMT (the transformers port of fairseq's WMT'19 models) with a character-level BPE
vocabulary, and Marian (OPUS-MT) with a SentencePiece model trained on the spot.
"""

from __future__ import annotations

import json
import string
from pathlib import Path

CHARS = string.ascii_letters + string.digits + ".,!?'-"
# Small but real: 2+2 layers, 4 heads. init_std 0.5 makes logits sharp, so greedy choices
# are rarely near ties between engines.
TINY = dict(
    d_model=32,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=64,
    decoder_ffn_dim=64,
    max_position_embeddings=128,
    init_std=0.5,
    dropout=0.0,
    num_beams=1,
)


def build_tiny_fsmt(out: Path, langs=("en", "de"), seed: int = 0) -> Path:
    import torch
    from transformers import FSMTConfig, FSMTForConditionalGeneration, FSMTTokenizer

    torch.manual_seed(seed)
    out.mkdir(parents=True, exist_ok=True)
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for char in CHARS:  # no merges: every word is its characters, the last one marked </w>
        vocab.setdefault(char, len(vocab))
        vocab.setdefault(char + "</w>", len(vocab))
    for side in ("src", "tgt"):
        (out / f"vocab-{side}.json").write_text(json.dumps(vocab), encoding="utf-8")
    (out / "merges.txt").write_text("", encoding="utf-8")
    tokenizer = FSMTTokenizer(
        langs=list(langs),
        src_vocab_file=str(out / "vocab-src.json"),
        tgt_vocab_file=str(out / "vocab-tgt.json"),
        merges_file=str(out / "merges.txt"),
    )
    config = FSMTConfig(
        langs=list(langs),
        src_vocab_size=len(vocab),
        tgt_vocab_size=len(vocab),
        activation_function="relu",
        scale_embedding=True,
        tie_word_embeddings=False,
        **TINY,
    )
    model = FSMTForConditionalGeneration(config).eval()
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def build_tiny_marian(out: Path, corpus: list[str], seed: int = 0) -> Path:
    import sentencepiece as spm
    import torch
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    torch.manual_seed(seed)
    out.mkdir(parents=True, exist_ok=True)
    spm_file = _train_spm(out, corpus)
    for name in ("source.spm", "target.spm"):
        (out / name).write_bytes(spm_file.read_bytes())
    processor = spm.SentencePieceProcessor(model_file=str(spm_file))
    vocab = {"</s>": 0, "<unk>": 1}
    for i in range(processor.get_piece_size()):
        vocab.setdefault(processor.id_to_piece(i), len(vocab))
    vocab["<pad>"] = len(vocab)
    (out / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    spm_file.unlink()
    tokenizer = MarianTokenizer(
        source_spm=str(out / "source.spm"), target_spm=str(out / "target.spm"), vocab=str(out / "vocab.json")
    )
    config = MarianConfig(
        vocab_size=len(vocab),
        pad_token_id=vocab["<pad>"],
        eos_token_id=0,
        decoder_start_token_id=vocab["<pad>"],
        **TINY,
    )
    MarianMTModel(config).eval().save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def _train_spm(out: Path, corpus: list[str]) -> Path:
    import sentencepiece as spm

    text_file = out / "spm-train.txt"
    text_file.write_text("\n".join(corpus) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(text_file),
        model_prefix=str(out / "spm"),
        vocab_size=96,
        hard_vocab_limit=False,
        character_coverage=1.0,
        bos_id=-1,
        eos_id=-1,
        pad_id=-1,
        unk_id=0,
        minloglevel=2,
    )
    text_file.unlink()
    (out / "spm.vocab").unlink()
    return out / "spm.model"


def build_tiny_m2m100(out: Path, corpus: list[str], seed: int = 0) -> Path:
    """M2M100 (multilingual: language tokens like __de__ force the target)."""
    import sentencepiece as spm
    import torch
    from transformers import M2M100Config, M2M100ForConditionalGeneration, M2M100Tokenizer

    torch.manual_seed(seed)
    out.mkdir(parents=True, exist_ok=True)
    spm_file = _train_spm(out, corpus)
    processor = spm.SentencePieceProcessor(model_file=str(spm_file))
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for i in range(processor.get_piece_size()):
        vocab.setdefault(processor.id_to_piece(i), len(vocab))
    (out / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    base = M2M100Tokenizer(vocab_file=str(out / "vocab.json"), spm_file=str(spm_file), src_lang="en")
    # Language tokens listed as additional special tokens in id order, as on the hub, so
    # converters can rebuild the full vocabulary: base + languages + made-up words.
    languages = sorted(base.lang_token_to_id, key=base.lang_token_to_id.get)
    tokenizer = M2M100Tokenizer(
        vocab_file=str(out / "vocab.json"),
        spm_file=str(spm_file),
        src_lang="en",
        additional_special_tokens=languages,
    )
    config = M2M100Config(vocab_size=len(vocab) + len(languages) + tokenizer.num_madeup_words, **TINY)
    M2M100ForConditionalGeneration(config).eval().save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def build_tiny_nllb(out: Path, seed: int = 0) -> Path:
    """NLLB-200 (an M2M100 network with FLORES-200 codes like deu_Latn as language tokens)."""
    import torch
    from transformers import M2M100Config, M2M100ForConditionalGeneration, NllbTokenizer

    torch.manual_seed(seed)
    out.mkdir(parents=True, exist_ok=True)
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "▁": 4}
    for char in CHARS:  # character-level BPE without merges: small and covers any word
        vocab.setdefault(char, len(vocab))
    tokenizer = NllbTokenizer(vocab=vocab, merges=[], src_lang="eng_Latn")
    config = M2M100Config(
        vocab_size=len(tokenizer), pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2, **TINY
    )
    M2M100ForConditionalGeneration(config).eval().save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
