"""Text that ingest refuses before it reaches the lake or a translation engine.

A NUL byte, a lone surrogate or a 5,000-character "word" is not a sentence; stored, it
would be sent to every engine on every later run (and stall or crash some of them). A
sentence written mostly in a script the corpus's language does not use (Hebrew in an
English corpus) is not one an engine for that language can make views of: it comes back
unchanged and makes a pair of identical views. So does a letter buried under a flood of
combining marks ("Zalgo" text), and a word spelt with a letter of another script that looks
like its own (a Cyrillic 'а' in a Latin word) is not the word it shows: an engine does not
know it, and it would give visually identical text a second id. Such a sentence is rejected
with a reason and kept for inspection, never silently dropped or rewritten.
"""

from __future__ import annotations

import functools
import unicodedata

import regex
from viewmill.augment.ingest.confusable import mixed_script_confusables
from viewmill.storage.ids import text_hash

MAX_TOKEN_CHARS = 100  # longer than any word or ordinary URL
MAX_SENTENCE_CHARS = 1_000  # ~150 words; the encoders truncate far earlier
SHOWN_CHARS = 300  # of a rejected sentence, kept in the lake
# UAX #15's stream-safe text format allows 30 non-starters in a row: no language stacks more
# on one letter. Beyond that a sentence is rejected, not cut down to 30: capping would store a
# text the file does not hold, and what is left is still noise that engines give back unchanged.
MAX_COMBINING_MARKS = 30

REASONS = (
    "control_characters", "invalid_unicode", "combining_mark_flood", "token_too_long", "sentence_too_long",
    "wrong_script", "mixed_script_confusable", "paragraph_too_long",
)  # fmt: skip

# The scripts each language is written in (ISO 639-1 codes, the languages viewmill's engines,
# data sets and evaluations handle, and their neighbours). Common (digits, punctuation,
# symbols) and Inherited (combining marks) letters count for every language; a language not
# listed is not checked.
_LATIN = ("en", "es", "ca", "fr", "de", "pt", "it", "nl", "tr", "pl", "ro", "sv", "da", "no", "nb", "nn", "fi",
          "cs", "sk", "hu", "hr", "sl", "et", "lv", "lt", "sq", "eu", "gl", "af", "id", "ms", "vi", "sw", "tl",
          "is", "ga", "cy", "mt", "az", "uz")  # fmt: skip
LANG_SCRIPTS: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(_LATIN, ("Latin",)),
    **dict.fromkeys(("ru", "uk", "be", "bg", "mk", "kk", "ky", "mn", "tg"), ("Cyrillic",)),
    "sr": ("Cyrillic", "Latin"),
    **dict.fromkeys(("ar", "fa", "ur", "ps", "ku"), ("Arabic",)),
    **dict.fromkeys(("he", "yi"), ("Hebrew",)),
    "el": ("Greek",),
    **dict.fromkeys(("hi", "mr", "ne", "sa"), ("Devanagari",)),
    "bn": ("Bengali",), "pa": ("Gurmukhi",), "gu": ("Gujarati",), "ta": ("Tamil",), "te": ("Telugu",),
    "kn": ("Kannada",), "ml": ("Malayalam",), "si": ("Sinhala",), "th": ("Thai",), "ka": ("Georgian",),
    "hy": ("Armenian",), "am": ("Ethiopic",),
    "zh": ("Han",), "ja": ("Han", "Hiragana", "Katakana"), "ko": ("Hangul", "Han"),
}  # fmt: skip
# Words, roughly: a run of letters, or one character of the scripts written without spaces
# between words (one Han character is a morpheme), so "我喜欢iPhone" is mostly Chinese.
_WORD = regex.compile(
    r"[\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}\p{Thai}]|[[\p{L}\p{M}]--[\p{Han}\p{Hiragana}\p{Katakana}"
    r"\p{Hangul}\p{Thai}]]+",
    flags=regex.V1,
)

# The first of these decides: a control character, or invalid Unicode (a lone surrogate, a
# decoding's replacement mark, a noncharacter: U+FDD0-FDEF and the last two of every plane).
_BAD_CHAR = regex.compile(
    r"[\p{Cc}\p{Cs}\ufffd\ufdd0-\ufdef" + "".join(rf"\U{p:04x}fffe\U{p:04x}ffff" for p in range(0x11)) + "]"
)
# Combining marks (Mn, Mc, Me) in a row, counted in NFD so a precomposed letter counts its own.
_MARK_FLOOD = regex.compile(rf"\p{{M}}{{{MAX_COMBINING_MARKS + 1},}}")


def lang_scripts(lang: str) -> tuple[str, ...] | None:
    """The scripts `lang` is written in (a BCP 47 tag like pt-BR uses its language), or None
    when the language is not in the table."""
    return LANG_SCRIPTS.get(lang.replace("_", "-").split("-")[0].lower())


@functools.cache
def _native(scripts: tuple[str, ...]) -> regex.Pattern:
    names = "".join(rf"\p{{Script={name}}}" for name in (*scripts, "Common", "Inherited"))
    return regex.compile(f"[{names}]")


def wrong_script(text: str, lang: str) -> bool:
    """Whether most words of `text` are in scripts `lang` is not written in (a word counts
    in the script of its first letter; text without letters is never wrong)."""
    scripts = lang_scripts(lang)
    if scripts is None:
        return False
    if text.isascii():  # the usual case, without the regex: ASCII letters are Latin
        return "Latin" not in scripts and any(char.isalpha() for char in text)
    native = _native(scripts)
    words = _WORD.findall(text)
    foreign = sum(1 for word in words if native.match(word) is None)
    return foreign * 2 > len(words)


def combining_mark_flood(text: str) -> bool:
    """Whether `text` stacks more than MAX_COMBINING_MARKS combining marks in a row."""
    return not text.isascii() and _MARK_FLOOD.search(unicodedata.normalize("NFD", text)) is not None


def rejection(text: str, lang: str | None = None) -> str | None:
    """Why `text` (already whitespace-normalised) is not a usable sentence of a corpus in
    `lang` (None: any language), or None."""
    bad = _BAD_CHAR.search(text)
    if bad is not None:
        return "control_characters" if unicodedata.category(bad.group()) == "Cc" else "invalid_unicode"
    if combining_mark_flood(text):  # before the token check: a flooded word is long too
        return "combining_mark_flood"
    if any(len(token) > MAX_TOKEN_CHARS for token in text.split()):
        return "token_too_long"
    if len(text) > MAX_SENTENCE_CHARS:
        return "sentence_too_long"
    if lang is not None and wrong_script(text, lang):
        return "wrong_script"
    if mixed_script_confusables(text):
        return "mixed_script_confusable"
    return None


def rejected_id(text: str) -> str:
    """A stable id for a rejected text (which may hold surrogates UTF-8 cannot encode)."""
    return text_hash(text.encode("unicode_escape").decode("ascii"))


def shown(text: str, reason: str | None = None) -> str:
    """A rejected text as it is kept: control characters and surrogates escaped (and, for a
    mixed-script confusable, the letters that look like another's: p\\u0430ssword), cut short."""
    marked = mixed_script_confusables(text) if reason == "mixed_script_confusable" else ""
    safe = "".join(
        char.encode("unicode_escape", "backslashreplace").decode("ascii")
        if unicodedata.category(char) in ("Cc", "Cs") or char in marked
        else char
        for char in text[: SHOWN_CHARS + 1]
    )
    return safe if len(text) <= SHOWN_CHARS else safe[:SHOWN_CHARS] + f"... ({len(text)} characters)"
