"""Ingest rejects unusable text (NUL and other control characters, invalid Unicode,
over-long tokens and sentences) with a reason, keeps it in the lake and counts it; every
Apertium batch has a time limit."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner
from viewmill.augment.ingest.corpus import ingest
from viewmill.augment.ingest.sanitise import rejection
from viewmill.pipelines.cli.app import app
from viewmill.storage.lake import Lake

from tests.conftest import needs_apertium

GOOD = ["A man is playing a guitar.", "Two dogs are running through a field."]
BAD = {
    "NUL\x00byte in a sentence here": "control_characters",
    "a bell \x07 rings in this sentence": "control_characters",
    "a" * 5000 + " is one word": "token_too_long",
    " ".join(["word"] * 300): "sentence_too_long",
    "broken \ufffd decoding in this line": "invalid_unicode",
}


def test_rejection_reasons():
    assert {text: rejection(text) for text in BAD} == BAD
    assert [rejection(t) for t in [*GOOD, "Ünïcödé façade, naïve café.", "see https://example.org/a/b?c=d"]] == [
        None
    ] * 4
    assert rejection("lone \ud800 surrogate here") == "invalid_unicode"


def test_ingest_keeps_rejected_sentences_with_their_reason(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join([GOOD[0], *BAD, GOOD[1], "NUL\x00byte in a sentence here"]) + "\n", encoding="utf-8")
    result = ingest([corpus], corpus="c", fmt="text", lang="en", detokenize=True, min_words=3, max_words=400,
                    limit=None, run_id="r1")  # fmt: skip
    assert result.sentences["text"].to_pylist() == GOOD
    assert result.stats.rejected == {"control_characters": 3, "token_too_long": 1, "sentence_too_long": 1,
                                     "invalid_unicode": 1}  # fmt: skip
    rows = result.rejected.to_pylist()
    assert [(r["row"], r["reason"]) for r in rows] == [
        (2, "control_characters"),
        (3, "control_characters"),
        (4, "token_too_long"),
        (5, "sentence_too_long"),
        (6, "invalid_unicode"),
    ]  # fmt: skip  (the repeated NUL line on row 8 is the same text: kept once)
    assert rows[0]["text"] == "NUL\\x00byte in a sentence here" and rows[0]["length"] == 27
    assert rows[2]["text"] == "a" * 300 + "... (5012 characters)"


def test_surrogates_from_json_are_rejected(tmp_path):
    corpus = tmp_path / "snli_train.jsonl"
    record = {"sentence1": "A lone \ud800 half of a pair.", "sentence2": "A fine sentence is here.", "gold_label": "-"}
    corpus.write_text(json.dumps(record) + "\n", encoding="utf-8")
    result = ingest([corpus], corpus="c", fmt="nli-jsonl", lang="en", detokenize=False, min_words=3, max_words=64,
                    limit=None, run_id="r1")  # fmt: skip
    assert result.sentences["text"].to_pylist() == ["A fine sentence is here."]
    assert result.rejected.to_pylist()[0]["text"] == "A lone \\ud800 half of a pair."


def test_a_run_stores_rejected_sentences_and_counts_them(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join([*GOOD, *BAD]) + "\n", encoding="utf-8")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        f"name: sane\ncorpus: {{files: [{corpus}], max_words: 400}}\n"
        "augmenters:\n  - {name: same, method: identity}\n"
        "  - {name: syn, method: synonym, ratio: 0.3, seed: 1}\n"
        "pair: {view_a: same, view_b: syn, keep_identical: true}\n",
        encoding="utf-8",
    )
    state = tmp_path / "state"
    result = CliRunner().invoke(app, ["run", str(recipe), "--no-prefect", "--state-dir", str(state)])
    assert result.exit_code == 0, result.output
    with Lake(state / "lake", read_only=True) as lake:
        assert lake.scalar("SELECT count(*) FROM sentences") == 2
        reasons = lake.arrow("SELECT reason, count(*) AS n FROM rejected_sentences GROUP BY ALL ORDER BY ALL")
        counts = json.loads(lake.scalar("SELECT counts FROM runs"))
    assert reasons.to_pylist() == [
        {"reason": "control_characters", "n": 2}, {"reason": "invalid_unicode", "n": 1},
        {"reason": "sentence_too_long", "n": 1}, {"reason": "token_too_long", "n": 1},
    ]  # fmt: skip
    assert counts["ingest"]["rejected"] == {"control_characters": 2, "invalid_unicode": 1, "sentence_too_long": 1,
                                            "token_too_long": 1}  # fmt: skip


@needs_apertium
def test_an_apertium_batch_over_its_time_limit_is_stopped():
    from viewmill.augment.apertium import ApertiumEngine
    from viewmill.augment.engines import DecodingSpec, EngineError

    engine = ApertiumEngine("en", "es", timeout_s=0)
    try:
        with pytest.warns(UserWarning, match="took longer than 0 s on one batch"):
            assert engine.translate(["A man is playing a guitar."], "en", "es", DecodingSpec()) == [[""]]
        with pytest.raises(EngineError, match="took longer than 0 s on one batch"):
            engine.translate([*GOOD, "The cat sleeps."], "en", "es", DecodingSpec())
    finally:
        engine.close()
    timed = ApertiumEngine("en", "es")
    try:
        out = timed.translate(GOOD, "en", "es", DecodingSpec())
    finally:
        timed.close()
    assert [len(hypotheses) for hypotheses in out] == [1, 1] and all(h[0] for h in out), (
        "the default limit lets it through"
    )


SCRIPTS = {  # case: (text, corpus lang, reason)
    "Hebrew in en": ("שלום עולם, מה שלומך?", "en", "wrong_script"),
    "Hebrew in he": ("שלום עולם, מה שלומך?", "he", None),
    "Russian in en": ("Привет мир, как дела?", "en", "wrong_script"),
    "Russian in ru": ("Привет мир, как дела?", "ru", None),
    "English in ar": ("A man plays a guitar.", "ar", "wrong_script"),
    "English quoting Hebrew": ("The word שלום means peace here.", "en", None),
    "Chinese with a brand name": ("我喜欢iPhone手机", "zh", None),  # a Han character is a word, not a letter
    "Japanese": ("東京は日本の首都です。", "ja", None),
    "region tag": ("Ünïcödé façade, naïve café.", "pt-BR", None),  # pt-BR uses pt's scripts
    "English in el": ("Numbers 12345 and 678.", "el", "wrong_script"),
    "no letters": ("12345 678 90", "el", None),
    "unknown language": ("שלום עולם", "xx", None),
    "no language": ("שלום עולם", None, None),
}


@pytest.mark.parametrize(("text", "lang", "reason"), SCRIPTS.values(), ids=SCRIPTS.keys())
def test_a_sentence_mostly_in_another_script_than_its_languages_is_rejected(text, lang, reason):
    assert rejection(text, lang) == reason
