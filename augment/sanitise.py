"""Text that ingest refuses before it reaches the lake or a translation engine.

A NUL byte, a lone surrogate or a 5,000-character "word" is not a sentence; stored, it
would be sent to every engine on every later run (and stall or crash some of them). Such
a sentence is rejected with a reason and kept for inspection, never silently dropped.
"""

from __future__ import annotations

import unicodedata

from viewmill.storage.ids import text_hash

MAX_TOKEN_CHARS = 100  # longer than any word or ordinary URL
MAX_SENTENCE_CHARS = 1_000  # ~150 words; the encoders truncate far earlier
SHOWN_CHARS = 300  # of a rejected sentence, kept in the lake

REASONS = ("control_characters", "invalid_unicode", "token_too_long", "sentence_too_long")


def rejection(text: str) -> str | None:
    """Why `text` (already whitespace-normalised) is not a usable sentence, or None."""
    for char in text:
        category = unicodedata.category(char)
        if category == "Cc":
            return "control_characters"
        if category == "Cs" or char == "\ufffd" or (0xFDD0 <= ord(char) <= 0xFDEF) or ord(char) & 0xFFFE == 0xFFFE:
            return "invalid_unicode"  # a lone surrogate, a decoding's replacement mark, a noncharacter
    if any(len(token) > MAX_TOKEN_CHARS for token in text.split()):
        return "token_too_long"
    if len(text) > MAX_SENTENCE_CHARS:
        return "sentence_too_long"
    return None


def rejected_id(text: str) -> str:
    """A stable id for a rejected text (which may hold surrogates UTF-8 cannot encode)."""
    return text_hash(text.encode("unicode_escape").decode("ascii"))


def shown(text: str) -> str:
    """A rejected text as it is kept: control characters and surrogates escaped, cut short."""
    safe = "".join(
        char.encode("unicode_escape", "backslashreplace").decode("ascii")
        if unicodedata.category(char) in ("Cc", "Cs")
        else char
        for char in text[: SHOWN_CHARS + 1]
    )
    return safe if len(text) <= SHOWN_CHARS else safe[:SHOWN_CHARS] + f"... ({len(text)} characters)"
