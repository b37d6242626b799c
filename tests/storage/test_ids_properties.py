"""Properties of ingest normalisation: a sentence's id does not change with invisible
characters (any of Unicode's Default_Ignorable_Code_Point, inserted anywhere) or with the
Unicode normal form it arrives in."""

from __future__ import annotations

import unicodedata

import regex
import xxhash
from hypothesis import example, given, settings
from hypothesis import strategies as st
from viewmill.storage.ids import id_text, normalize_text, sentence_id, text_hash

# Computed from the property itself (not viewmill's code), so a handful-only removal fails.
IGNORABLES = [chr(c) for c in range(0x110000) if regex.match(r"\p{Default_Ignorable_Code_Point}", chr(c))]
# Text where the kept joiners matter: Persian, Devanagari and emoji beside Latin and spaces.
JOINING = "\u0645\u06cc\u062e\u0648\u0627\u0647\u0915\u094d\u0937\u093f \U0001f469\U0001f3fd\U0001f4bb\u2764aé "
TEXT = st.one_of(
    st.text(st.characters(exclude_categories=("Cs",)), max_size=40),  # surrogates cannot be encoded
    st.text(st.sampled_from(JOINING), max_size=40),
)


@st.composite
def with_ignorables(draw: st.DrawFn) -> tuple[str, str]:
    """(text, the same text with random ignorable characters inserted at random places)."""
    text = draw(TEXT)
    chars = list(text)
    for _ in range(draw(st.integers(0, 8))):
        chars.insert(draw(st.integers(0, len(chars))), draw(st.sampled_from(IGNORABLES)))
    return text, "".join(chars)


def test_the_ignorables_list_is_the_full_property():
    assert len(IGNORABLES) > 4000 and {"\u200b", "\u200c", "\u200d", "\ufeff", "\u00ad", "\U000e0041"} <= set(
        IGNORABLES
    )


@settings(max_examples=400, deadline=None)
@given(with_ignorables(), st.sampled_from(["NFC", "NFD"]))
@example(("cafe\u0301", "cafe\u200b\u0301"), "NFD")
@example(("\u0645\u06cc\u062e", "\u0645\u06cc\u200c\u062e"), "NFC")
def test_visually_identical_texts_get_one_id(pair, form):
    text, variant = pair
    variant = unicodedata.normalize(form, variant)
    assert id_text(variant) == id_text(text)
    assert sentence_id(variant) == sentence_id(text) == sentence_id(unicodedata.normalize("NFC", text))


@settings(max_examples=400, deadline=None)
@given(with_ignorables())
def test_the_stored_text_keeps_its_id_and_is_already_normal(pair):
    _, variant = pair
    stored = normalize_text(variant)
    assert sentence_id(stored) == sentence_id(variant)
    assert normalize_text(stored) == stored
    assert unicodedata.is_normalized("NFC", stored)
    kept = r"[\p{Default_Ignorable_Code_Point}--[\u200c\u200d\ufe0e\ufe0f\p{Bidi_Control}]]"
    assert not regex.search(kept, stored, regex.V1)


# -- bidi controls and plain text (issue 30, item 7) -----------------------------------------
BIDI_CONTROLS = [chr(c) for c in range(0x110000) if regex.match(r"\p{Bidi_Control}", chr(c))]
VISIBLE = st.text(st.characters(exclude_categories=("Cs",)), max_size=40).map(
    lambda text: " ".join(
        unicodedata.normalize("NFC", regex.sub(r"\p{Default_Ignorable_Code_Point}", "", text)).split()
    )
)


@st.composite
def with_bidi_controls(draw: st.DrawFn) -> tuple[str, str]:
    """(visible text as stored, the same text with bidi controls inserted at random places)."""
    text = draw(VISIBLE)
    chars = list(text)
    for _ in range(draw(st.integers(1, 8))):
        chars.insert(draw(st.integers(0, len(chars))), draw(st.sampled_from(BIDI_CONTROLS)))
    return text, "".join(chars)


def test_the_bidi_controls_are_the_twelve_of_the_property():
    assert len(BIDI_CONTROLS) == 12 and {"\u202e", "\u2067", "\u200f", "\u061c"} <= set(BIDI_CONTROLS)


@settings(max_examples=400, deadline=None)
@given(with_bidi_controls())
@example(("x\u0301", "x\u202e\u0301"))  # a control between a letter and its accent
@example(("a b", "a \u2067 b\u2069"))
def test_bidi_controls_round_trip_in_the_stored_text_and_never_change_the_id(pair):
    text, variant = pair
    assert normalize_text(variant) == variant, "the stored text keeps every control where the file had it"
    assert sentence_id(variant) == sentence_id(text) == text_hash(text)


@settings(max_examples=400, deadline=None)
@given(st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E) | st.sampled_from("\t\n "), max_size=80))
def test_an_ascii_sentences_id_is_the_hash_of_its_single_spaced_text_as_before(text):
    folded = " ".join(text.split())
    assert normalize_text(text) == id_text(text) == folded
    assert sentence_id(text) == xxhash.xxh3_64_hexdigest(folded.encode("utf-8"))


PINNED_IDS = {
    "A man is playing a guitar.": "8d2ab516d66cf5e8",
    "Two dogs run through a field.": "e5a89174a46208e7",
    "A man plays a guitar in the caf\u00e9.": "66caa4fb08863ba1",
    "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd": "fada45fa996d8730",
    "The code \u202eolleh\u202c says hello.": "556bccbbe19212b1",
}


def test_ordinary_sentence_ids_are_the_ones_the_lake_already_holds():
    # Ids of ingest before bidi controls were kept (main at 312042b): unchanged.
    assert {text: sentence_id(text) for text in PINNED_IDS} == PINNED_IDS
