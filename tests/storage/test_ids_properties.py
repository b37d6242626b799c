"""Properties of ingest normalisation: a sentence's id does not change with invisible
characters (any of Unicode's Default_Ignorable_Code_Point, inserted anywhere) or with the
Unicode normal form it arrives in."""

from __future__ import annotations

import unicodedata

import regex
from hypothesis import example, given, settings
from hypothesis import strategies as st
from viewmill.storage.ids import id_text, normalize_text, sentence_id

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
    assert not regex.search(r"[\p{Default_Ignorable_Code_Point}--[\u200c\u200d\ufe0e\ufe0f]]", stored, regex.V1)
