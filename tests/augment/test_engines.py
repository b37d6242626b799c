import pytest

from augment.engines import ApertiumEngine, DecodingSpec, EngineError, make_engine
from tests.conftest import SENTENCES, needs_apertium

pytestmark = needs_apertium


def test_apertium_round_trip_returns_one_hypothesis_per_input_in_order():
    forward, back = ApertiumEngine("en", "es"), ApertiumEngine("es", "en")
    spanish = forward.translate(SENTENCES[:5], "en", "es", DecodingSpec())
    assert len(spanish) == 5 and all(len(h) == 1 for h in spanish)
    assert spanish[0][0].startswith("Un hombre")
    english = back.translate([h[0] for h in spanish], "es", "en", DecodingSpec())
    assert english[1][0].lower().startswith("two dogs")
    assert forward.revision != "unknown" and forward.model == "apertium-eng-spa"


def test_markup_characters_pass_through_without_breaking_line_alignment():
    texts = ["Use [brackets] and ^carets$ here.", "Back\\slash <b>tag</b> {x}.", "Last line."]
    out = ApertiumEngine("en", "ca").translate(texts, "en", "ca", DecodingSpec())
    assert (len(out) == 3 and out[2][0].startswith("Darrera")) or out[2][0].startswith("Última")


def test_unsupported_direction_names_the_package_to_install():
    with pytest.raises(EngineError, match="apt-get install apertium-eng-fra"):
        ApertiumEngine("en", "fr")
    with pytest.raises(EngineError, match="no language code known"):
        ApertiumEngine("en", "xx")
    with pytest.raises(EngineError, match="unknown engine 'moses'"):
        make_engine("moses", "en", "es")


def test_multiline_text_is_refused_before_translation():
    with pytest.raises(EngineError, match="single-line"):
        ApertiumEngine("en", "es").translate(["two\nlines"], "en", "es", DecodingSpec())
