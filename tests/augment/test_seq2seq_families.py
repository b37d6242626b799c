"""Seq2seq model families (`augment/neural.py`): which family a model is, from its config and
tokenizer, and what each checks, sets on the tokenizer and forces as the first target token.
Fake tokenizers and configs: no model is loaded."""

from types import SimpleNamespace

import pytest
from viewmill.augment.engines import EngineError
from viewmill.augment.neural import (
    FsmtFamily,
    M2m100Family,
    NllbFamily,
    Seq2SeqFamily,
    seq2seq_family,
)


class FakeTokenizer:
    unk_token_id = 0
    model_max_length = 10**30  # transformers' "no limit"

    def __init__(self) -> None:
        self.src_lang: str | None = None
        self.tokens = {"__de__": 5, "__en__": 6, "eng_Latn": 7, "deu_Latn": 8}

    def convert_tokens_to_ids(self, token: str) -> int:
        return self.tokens.get(token, self.unk_token_id)

    def get_lang_token(self, lang: str) -> str:
        if len(lang) != 2:
            raise KeyError(lang)
        return f"__{lang}__"


class NllbTokenizerFast(FakeTokenizer):
    """Named as transformers' NLLB tokenizer: NLLB shares M2M100's model type."""


def _config(model_type: str, **more) -> SimpleNamespace:
    return SimpleNamespace(model_type=model_type, max_position_embeddings=512, **more)


@pytest.mark.parametrize(
    ("model_type", "tokenizer", "family"),
    [("fsmt", FakeTokenizer, FsmtFamily), ("marian", FakeTokenizer, Seq2SeqFamily),
     ("m2m_100", NllbTokenizerFast, NllbFamily), ("m2m_100", FakeTokenizer, M2m100Family)],
)  # fmt: skip
def test_the_family_comes_from_the_model_type_and_the_tokenizer(model_type, tokenizer, family):
    assert type(seq2seq_family("m", tokenizer(), _config(model_type))) is family


def test_a_model_of_no_family_is_refused_with_its_type():
    with pytest.raises(EngineError, match="m: model type 't5' is not a supported translation model"):
        seq2seq_family("m", FakeTokenizer(), _config("t5"))


def test_bilingual_families_check_the_pair_and_force_no_token():
    fsmt = seq2seq_family("wmt19", FakeTokenizer(), _config("fsmt", langs=["en", "de"]))
    fsmt.check("en", "de")
    with pytest.raises(EngineError, match="wmt19 translates en>de, not de>en"):
        fsmt.check("de", "en")
    marian = seq2seq_family("opus", FakeTokenizer(), _config("marian"))
    marian.check("xx", "yy")  # a Marian model's languages are its training data's: nothing to check
    for family in (fsmt, marian):
        family.set_source("en")
        assert family.tokenizer.src_lang is None and family.target_token("de") is None
        assert family.max_source_tokens() == 512


def test_nllb_uses_flores_codes():
    nllb = seq2seq_family("nllb", NllbTokenizerFast(), _config("m2m_100"))
    nllb.check("en", "de")
    nllb.set_source("en")
    assert (nllb.tokenizer.src_lang, nllb.target_token("de")) == ("eng_Latn", "deu_Latn")
    with pytest.raises(EngineError, match="nllb: no NLLB language code for 'xx'"):
        nllb.check("en", "xx")
    with pytest.raises(EngineError, match="no NLLB language code for 'fr'"):  # a code the vocabulary lacks
        nllb.check("fr", "en")


def test_m2m100_uses_its_language_tokens():
    m2m = seq2seq_family("m2m", FakeTokenizer(), _config("m2m_100"))
    m2m.check("en", "de")
    m2m.set_source("en")
    assert (m2m.tokenizer.src_lang, m2m.target_token("de")) == ("en", "__de__")
    for lang in ("fr", "xyz"):  # not a token; not a language the tokenizer knows
        with pytest.raises(EngineError, match=f"m2m: M2M100 has no language '{lang}'"):
            m2m.check("en", lang)
