import pytest
from viewmill.augment.apertium import ApertiumEngine
from viewmill.augment.engines import DecodingSpec, EngineError, make_engine

from tests.conftest import SENTENCES, needs_apertium
from viewmill.allocator import find_library

pytestmark = needs_apertium


def test_apertium_round_trip_returns_one_hypothesis_per_input_in_order():
    forward, back = ApertiumEngine("en", "es"), ApertiumEngine("es", "en")
    spanish = forward.translate(SENTENCES[:5], "en", "es", DecodingSpec())
    assert len(spanish) == 5 and all(len(h) == 1 for h in spanish)
    assert spanish[0][0].startswith("Un hombre")
    english = back.translate([h[0] for h in spanish], "es", "en", DecodingSpec())
    assert english[1][0].lower().startswith("two dogs")
    assert forward.revision != "unknown" and forward.model == "apertium-eng-spa"


@pytest.mark.skipif(find_library("jemalloc") is None, reason="needs libjemalloc2 (apt-get install libjemalloc2)")
def test_apertium_runs_on_its_own_allocator_when_viewmill_runs_on_jemalloc(monkeypatch):
    # With jemalloc preloaded, eng-cat throws std::bad_alloc on this sentence and its view was lost.
    monkeypatch.setenv("LD_PRELOAD", str(find_library("jemalloc")))
    forward, back = ApertiumEngine("en", "ca"), ApertiumEngine("ca", "en")
    catalan = forward.translate(["A group of people are sitting at a table."], "en", "ca", DecodingSpec())
    english = back.translate([catalan[0][0]], "ca", "en", DecodingSpec())
    assert english == [["A band of persons is seating at a table."]]
    forward.close(), back.close()


def test_markup_characters_pass_through_without_breaking_line_alignment():
    texts = ["Use [brackets] and ^carets$ here.", "Back\\slash <b>tag</b> {x}.", "Last line."]
    out = ApertiumEngine("en", "ca").translate(texts, "en", "ca", DecodingSpec())
    assert (len(out) == 3 and out[2][0].startswith("Darrera")) or out[2][0].startswith("Última")


def test_unsupported_direction_names_the_package_to_install():
    with pytest.raises(EngineError, match=r"Debian ships no Apertium package for en>fr: chain through"):
        ApertiumEngine("en", "fr")  # the package for a pair Debian ships: tests/augment/test_chains.py
    with pytest.raises(EngineError, match="no language code known"):
        ApertiumEngine("en", "xx")
    with pytest.raises(EngineError, match="unknown engine 'moses'"):
        make_engine("moses", "en", "es")


def test_multiline_text_is_refused_before_translation():
    with pytest.raises(EngineError, match="single-line"):
        ApertiumEngine("en", "es").translate(["two\nlines"], "en", "es", DecodingSpec())


def test_long_lived_pipeline_matches_the_apertium_command_and_survives_a_crash():
    import subprocess

    from tests.conftest import REPO

    lines = (REPO / "recipes" / "data" / "snli" / "s2.dev").read_text(encoding="utf-8").splitlines()
    texts = [" ".join(line.split()) for line in lines[:1500]]
    reference = [
        subprocess.run(
            ["apertium", "-u", "eng-spa"], input=text + "\n", capture_output=True, text=True, check=True
        ).stdout.strip()
        for text in texts[:12]
    ]
    engine = ApertiumEngine("en", "es")
    try:
        # The pipeline runs the same programs as the apertium command, each sentence on its own.
        big = engine.translate(texts, "en", "es", DecodingSpec())  # far beyond the pipe buffers
        assert len(big) == len(texts) and [h[0] for h in big[:12]] == reference
        pid = engine._pipeline.pid
        again = engine.translate(texts[:20], "en", "es", DecodingSpec())
        assert engine._pipeline.pid == pid, "one process per direction, reused across batches"
        assert len(again) == 20 and all(h[0] for h in again)

        engine.close()  # as if the pipeline had died: the next batch starts a new one
        assert engine.translate(texts[:3], "en", "es", DecodingSpec()) == big[:3]
        assert engine._pipeline.pid != pid
    finally:
        engine.close()


# Apertium 3's eng-cat crashes on this sentence (one of SNLI's, reduced): its whole batch
# comes back empty.
CRASHES_ENG_CAT = "a ball that is quickly approaching the goal box."


def test_a_sentence_that_crashes_apertium_gets_an_empty_translation_and_its_batch_goes_on():
    engine = ApertiumEngine("en", "ca")
    try:
        texts = [*SENTENCES[:5], CRASHES_ENG_CAT, *SENTENCES[5:9]]
        with pytest.warns(UserWarning, match="cannot translate"):
            out = engine.translate(texts, "en", "ca", DecodingSpec())
        alone = [engine.translate([t], "en", "ca", DecodingSpec())[0][0] for t in texts if t != CRASHES_ENG_CAT]
    finally:
        engine.close()
    assert out[5] == [""]
    assert [hyp[0] for i, hyp in enumerate(out) if i != 5] == alone


def test_a_batch_in_which_every_sentence_fails_stops_the_run():
    engine = ApertiumEngine("en", "ca")
    try:
        with pytest.warns(UserWarning), pytest.raises(EngineError, match="returned nothing for a sentence"):
            engine.translate([CRASHES_ENG_CAT] * 4, "en", "ca", DecodingSpec())
    finally:
        engine.close()


def test_a_sentences_translation_does_not_depend_on_the_others_in_its_batch():
    from tests.conftest import REPO

    lines = (REPO / "recipes" / "data" / "snli-dev" / "s2.dev").read_text(encoding="utf-8").splitlines()
    texts = list(dict.fromkeys(" ".join(line.split()) for line in lines[:400]))
    engine = ApertiumEngine("en", "ca")
    try:
        # Apertium's tagger and transfer read across lines (a line without final punctuation
        # ran on into the next: "snow covered earth" lost "earth covered" to the next line), so
        # views depended on their neighbours, hence on commit sizes and shards.
        batch = [h[0] for h in engine.translate(texts, "en", "ca", DecodingSpec())]
        backwards = [h[0] for h in engine.translate(texts[::-1], "en", "ca", DecodingSpec())][::-1]
        alone = [engine.translate([t], "en", "ca", DecodingSpec())[0][0] for t in texts[:40]]
    finally:
        engine.close()
    assert batch == backwards
    assert batch[:40] == alone
