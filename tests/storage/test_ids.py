import pytest
from viewmill.storage.ids import fingerprint, normalize_text, sentence_id, text_hash


def test_sentence_id_is_stable_across_unicode_forms_and_whitespace():
    composed = "Un caf\u00e9  au lait "
    decomposed = "Un cafe\u0301 au lait"
    assert normalize_text(composed) == "Un caf\u00e9 au lait"
    assert sentence_id(composed) == sentence_id(decomposed)
    assert sentence_id("a b") != sentence_id("a c")
    assert len(sentence_id("x")) == 16


def test_fingerprint_ignores_dict_order_but_not_list_order():
    assert fingerprint({"a": 1, "b": 2}) == fingerprint({"b": 2, "a": 1})
    assert fingerprint([1, 2]) != fingerprint([2, 1])


# -- invisible characters (issue 21, item 8) ------------------------------------------------
PLAIN = "A man plays a guitar in the caf\u00e9."
INVISIBLE_VARIANTS = {
    "zero-width space": "A man plays a gui\u200btar in the caf\u00e9.",
    "zero-width joiner": "A man plays a\u200d guitar in the caf\u00e9.",
    "zero-width non-joiner": "A man\u200c plays a guitar in the caf\u00e9.",
    "byte-order mark": "\ufeffA man plays a guitar\ufeff in the caf\u00e9.",
    "soft hyphen, word joiner": "A man pla\u00adys a\u2060 guitar in the caf\u00e9.",
    "variation selector, tag, Hangul filler": "A man\ufe00 plays\U000e0041 a\u3164 guitar in the caf\u00e9.",
    "NFD": "A man plays a guitar in the cafe\u0301.",
    "NFD with a zero-width space between the letter and its accent": "A man plays a guitar in the cafe\u200b\u0301.",
}


@pytest.mark.parametrize("variant", INVISIBLE_VARIANTS.values(), ids=INVISIBLE_VARIANTS.keys())
def test_invisible_characters_and_unicode_forms_do_not_split_a_sentence(variant):
    assert normalize_text(variant) == PLAIN
    assert sentence_id(variant) == sentence_id(PLAIN)


JOINED = {
    "Persian ZWNJ": ("\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645", "\u0645\u06cc\u062e\u0648\u0627\u0647\u0645"),
    "Devanagari ZWJ": ("\u0915\u094d\u200d\u0937", "\u0915\u094d\u0937"),
    "emoji ZWJ sequence": ("\U0001f469\U0001f3fd\u200d\U0001f4bb codes", "\U0001f469\U0001f3fd\U0001f4bb codes"),
    "emoji presentation": ("I \u2764\ufe0f it", "I \u2764 it"),
    "flag sequence": ("\U0001f3f3\ufe0f\u200d\U0001f308 flag", "\U0001f3f3\U0001f308 flag"),
}


@pytest.mark.parametrize(("written", "bare"), JOINED.values(), ids=JOINED.keys())
def test_joiners_that_change_the_writing_are_kept_and_ignored_by_the_id(written, bare):
    assert normalize_text(written) == written, "the joiner changes how the text looks: it stays"
    assert normalize_text(written.replace("\u200d", "\u200b\u200d\u200b")) == written, "stray ones go"
    assert sentence_id(written) == sentence_id(bare)


# -- bidi controls (issue 30, item 7) ----------------------------------------------------------
BIDI_CONTROLS = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"  # Bidi_Control
BIDI = {
    "right-to-left override": "The code \u202eolleh\u202c says hello.",
    "isolates": "He wrote \u2067\u05e9\u05dc\u05d5\u05dd\u2069 on the wall.",
    "marks": "A man\u200f plays\u200e a guitar\u061c in the caf\u00e9.",
    "embeddings": "\u202aA man\u202c \u202bplays\u202c a \u202dguitar\u202c.",
}


@pytest.mark.parametrize("written", BIDI.values(), ids=BIDI.keys())
def test_bidi_controls_stay_in_the_stored_text_and_the_id_ignores_them(written):
    bare = "".join(char for char in written if char not in BIDI_CONTROLS)
    assert normalize_text(written) == written, "the text reads as the file did"
    assert normalize_text(written.replace(" ", "\u200b  ")) == written, "the other invisible characters still go"
    assert sentence_id(written) == sentence_id(bare) == text_hash(bare)
