"""Ingest's policies for text that is not what it shows (issue 30, item 7), as properties: a
letter under more than 30 combining marks (UAX #15's stream-safe bound) is rejected as
`combining_mark_flood` and 30 or fewer are kept; a Latin word with one letter swapped for a
look-alike of another script is rejected as `mixed_script_confusable`, the letter named in
the kept text, while mixed-script text that is no spoof stays usable."""

from __future__ import annotations

import string
import unicodedata

import pytest
import regex
from hypothesis import example, given, settings
from hypothesis import strategies as st
from viewmill.augment.ingest.sanitise import MAX_COMBINING_MARKS, rejection, shown
from viewmill.storage.ids import normalize_text, sentence_id, text_hash

# Computed from Unicode's properties, not viewmill's code: combining marks of no script of their
# own, visible, one code point in NFD (so a stack of n of them is n marks however it is stored).
MARKS = [
    chr(c)
    for c in range(0x300, 0x20000)
    if regex.match(r"[[\p{M}&&\p{Script=Inherited}]--\p{Default_Ignorable_Code_Point}]", chr(c), flags=regex.V1)
    and unicodedata.normalize("NFD", chr(c)) == chr(c)
]
SENTENCE = "A man plays the {} in the park."


@st.composite
def stacked_word(draw: st.DrawFn) -> tuple[str, int]:
    """(a word of 1-3 letters, each with a stack of combining marks; the highest stack)."""
    stacks = draw(st.lists(st.integers(0, 3 * MAX_COMBINING_MARKS), min_size=1, max_size=3))
    letters = [draw(st.sampled_from(string.ascii_letters)) for _ in stacks]
    marks = ["".join(draw(st.lists(st.sampled_from(MARKS), min_size=n, max_size=n))) for n in stacks]
    return "".join(letter + stack for letter, stack in zip(letters, marks, strict=True)), max(stacks)


def test_the_bound_is_uax15s_and_the_marks_are_many():
    assert MAX_COMBINING_MARKS == 30 and len(MARKS) > 400


@settings(max_examples=300, deadline=None)
@given(stacked_word())
@example(("o" + "\u0301" * 30, 30))
@example(("o" + "\u0301" * 31, 31))
@example(("Z" + "\u0300\u0316\u0489" * 30, 90))  # the word: 90 marks on one letter
def test_more_than_30_combining_marks_on_one_letter_are_rejected_and_30_or_fewer_kept(drawn):
    word, highest = drawn
    text = normalize_text(SENTENCE.format(word))
    assert rejection(text, "en") == ("combining_mark_flood" if highest > MAX_COMBINING_MARKS else None)


def test_a_precomposed_letter_counts_its_own_accent():
    assert rejection("A caf\u00e9" + "\u0301" * 29 + " here.") is None
    assert rejection("A caf\u00e9" + "\u0301" * 30 + " here.") == "combining_mark_flood"
    assert rejection("A caf\u00e9" + "\u0301" * 300 + " here.") == "combining_mark_flood", "not token_too_long"


# Cyrillic and Greek letters Unicode's confusables.txt gives as look-alikes of Latin ones.
CYRILLIC = {"a": "\u0430", "c": "\u0441", "e": "\u0435", "i": "\u0456", "o": "\u043e", "p": "\u0440", "s": "\u0455",
            "x": "\u0445", "y": "\u0443", "j": "\u0458", "h": "\u04bb", "d": "\u0501"}  # fmt: skip
GREEK = {"o": "\u03bf", "v": "\u03bd", "a": "\u03b1", "p": "\u03c1", "i": "\u03b9", "u": "\u03c5"}
LOWER = st.text(string.ascii_lowercase, min_size=1, max_size=8)


@st.composite
def spoofed(draw: st.DrawFn) -> tuple[str, str, str]:
    """(a Latin sentence, the same with one letter of a word swapped for a look-alike, the look-alike).
    A Cyrillic look-alike may stand anywhere in a word of 3+ letters; a Greek one between two
    lowercase letters (beside capitals or at an edge it is notation: TNFα, γδT)."""
    before, after = draw(st.lists(LOWER, max_size=4)), draw(st.lists(LOWER, max_size=4))
    table = draw(st.sampled_from([CYRILLIC, GREEK]))
    letter = draw(st.sampled_from(sorted(table)))
    edge_ok = table is CYRILLIC
    head = draw(st.text(string.ascii_lowercase, min_size=0 if edge_ok else 1, max_size=8))
    tail = draw(st.text(string.ascii_lowercase, min_size=0 if edge_ok else 1, max_size=8))
    tail += "ab"[: max(0, 2 - len(head + tail))]  # two Latin letters at least: Latin is the main script
    start = "The " + "".join(word + " " for word in before)
    end = " ".join(["", *after]) + "."
    return start + head + letter + tail + end, start + head + table[letter] + tail + end, table[letter]


@settings(max_examples=300, deadline=None)
@given(spoofed())
@example(("The password is long.", "The p\u0430ssword is long.", "\u0430"))
def test_a_latin_sentence_with_one_look_alike_letter_is_rejected_naming_it(drawn):
    latin, spoof, letter = drawn
    assert rejection(latin, "en") is None
    assert sentence_id(latin) == text_hash(latin), "the plain sentence keeps its id"
    assert rejection(spoof, "en") == "mixed_script_confusable"
    escaped = letter.encode("unicode_escape").decode("ascii")
    assert shown(spoof, "mixed_script_confusable") == spoof.replace(letter, escaped)
    assert shown(spoof) == spoof, "other reasons keep the letter as it is"


KEPT = {
    "a Greek letter in a formula": "Let f(x) = \u03b1x + \u03b2 for every angle \u03b8 of 2\u03c0r.",
    "Greek letters in biology": "TNF\u03b1 and TGF\u03b2R2 bind to \u03b3\u03b4T cells and NF-\u03baB.",
    "a unit": "Add 5 \u03bcmol of salt to the water.",
    "a Russian word in English": "He said \u041f\u0440\u0438\u0432\u0435\u0442 to his friend.",
    "Japanese with Latin": "\u30ed\u30dc\u30c3\u30c8\u5de5\u5834\u3067OK\u3068\u8a00\u3063\u305f\u3002",
    "Chinese with a brand name": "\u6211\u559c\u6b22iPhone\u624b\u673a",
    "Korean": "\ud55c\uad6d\uc5b4\uc640 \u6f22\u5b57\ub97c \uc501\ub2c8\ub2e4.",
    "Greek": "\u0397 \u0391\u03b8\u03ae\u03bd\u03b1 \u03b5\u03af\u03bd\u03b1\u03b9 \u03c9\u03c1\u03b1\u03af\u03b1.",
    "accented Latin": "\u00dcn\u00efc\u00f6d\u00e9 fa\u00e7ade, na\u00efve caf\u00e9, Stra\u00dfe.",
}


@pytest.mark.parametrize("text", KEPT.values(), ids=KEPT.keys())
def test_mixed_script_text_that_is_no_spoof_is_kept(text):
    assert rejection(text) is None
