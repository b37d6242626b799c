"""Words spelt with a letter of another script that looks like one of their own.

"pаssword" with a Cyrillic 'а' shows as "password", yet it is another string: another
sentence id for visually identical text, and a word no engine or tokenizer knows. Unicode's
confusables (UTS #39 confusables.txt, as the confusable_homoglyphs package ships it) say
which letters look alike; a word is suspect when it mixes scripts (UTS #39's script sets:
Japanese, Korean and Chinese writing are each one, and Latin beside them is ordinary) and a
letter outside the word's main script looks like a letter of it. Mixed-script text that is
not a spoof stays usable: a Greek letter or a Russian word of their own, Japanese with Latin,
and a word whose scripts tie (αx, 2πr: a formula as often as a spoof).
"""

from __future__ import annotations

from collections import Counter

import regex
from confusable_homoglyphs import categories, confusables

# A word for the check: two or more letters (with their marks) in a row.
_LETTERS = regex.compile(r"\p{L}[\p{L}\p{M}]+")
_CJK = frozenset(("HAN", "HIRAGANA", "KATAKANA", "HANGUL", "BOPOMOFO"))
_NO_SCRIPT = frozenset(("COMMON", "INHERITED", "Unknown"))
_NAMES = [""]  # script names by code: chr(0) is "no script" (digits, punctuation, marks)


class _ScriptCodes(dict[int, str]):
    """A `str.translate` table: a character to one character naming its script, looked up in
    Unicode's script ranges once per character (a corpus repeats its letters), so a text's
    scripts are read at C speed."""

    def __missing__(self, point: int) -> str:
        name = categories.alias(chr(point))
        name = "" if name in _NO_SCRIPT else "HAN" if name in _CJK else name
        if name not in _NAMES:
            _NAMES.append(name)
        code = self[point] = chr(_NAMES.index(name))
        return code


_SCRIPT_CODES = _ScriptCodes()
_LATIN_IN_CJK = frozenset(("LATIN", "HAN"))


def _script(char: str) -> str:
    return _NAMES[ord(char.translate(_SCRIPT_CODES))]


def _looks_like(char: str, script: str) -> bool:
    """Whether confusables.txt pairs `char` with a spelling in `script` (and no other script)."""
    for homoglyph in confusables.confusables_data.get(char, ()):
        if {_script(other) for other in homoglyph["c"]} - {""} == {script}:
            return True
    return False


def _spoofs(word: str, codes: str) -> list[str]:
    """The letters of a word (with its script codes) that look like letters of its main
    script. Greek beside Latin is notation (TNFα, γδT, TGFβR2): such a letter counts only
    between two lowercase letters of the main script (pοst), where no notation puts it."""
    counts = Counter(code for code in codes if code != "\0")
    ranked = counts.most_common(2)
    names = {_NAMES[ord(code)] for code in counts}
    if len(ranked) < 2 or ranked[0][1] == ranked[1][1] or names <= _LATIN_IN_CJK:
        return []
    main = ranked[0][0]
    main_name = _NAMES[ord(main)]

    def inside(at: int) -> bool:
        return 0 < at < len(word) - 1 and all(
            word[at + side].islower() and codes[at + side] == main for side in (-1, 1)
        )

    return [
        char
        for at, (char, code) in enumerate(zip(word, codes, strict=True))
        if code not in ("\0", main)
        and (inside(at) or {_NAMES[ord(code)], main_name} != {"LATIN", "GREEK"})
        and _looks_like(char, main_name)
    ]


def mixed_script_confusables(text: str) -> str:
    """The letters that make a word of `text` mixed-script while looking like a letter of the
    word's main script (the Cyrillic 'а' of a Latin "pаssword"), each once; '' when none."""
    if text.isascii():
        return ""
    codes = text.translate(_SCRIPT_CODES)
    if len(set(codes) - {"\0"}) < 2:
        return ""  # the usual case: one script in the whole text
    found: dict[str, None] = {}
    for word in _LETTERS.finditer(text):
        word_codes = codes[word.start() : word.end()]
        if len(set(word_codes) - {"\0"}) > 1:
            found.update(dict.fromkeys(_spoofs(word.group(), word_codes)))
    return "".join(found)
