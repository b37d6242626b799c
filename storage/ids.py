"""Stable, content-derived identifiers.

A sentence's id is taken over its text without invisible characters, in NFC, single-spaced
(`id_text`). Lake data written before invisible characters were removed keeps its ids,
except for texts that held such characters: those get a new id on their next ingest (the
old rows stay; the corpus version names the new ids). Keeping bidi controls in the stored
text (issue 30.7) changed no id: the id never held them.
"""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path
from typing import Any

import regex
import xxhash

# Unicode's Default_Ignorable_Code_Point property, all of it (zero-width space, ZWJ/ZWNJ,
# BOM, soft hyphen, bidi marks, variation selectors, tags, Hangul fillers, and the reserved
# ranges Unicode keeps for future ones, so the set never grows): characters that render as
# nothing, yet would give one visible sentence several ids.
_IGNORABLE = regex.compile(r"\p{Default_Ignorable_Code_Point}+")
# Bidi controls (Unicode's Bidi_Control: LRM/RLM, ALM, the embeddings, overrides and isolates)
# change the order the text is shown in: an override or isolate removed makes the stored text
# read differently from the file. They stay in the stored text; the id ignores them with the
# rest, so a sentence with and without them is one sentence (the first spelling read is kept).
_DROPPED = regex.compile(r"[\p{Default_Ignorable_Code_Point}--\p{Bidi_Control}]+", flags=regex.V1)
# ZWNJ and ZWJ between letters of a joining script change how the word is written (Persian
# "می‌خواهم", Hindi conjuncts), and ZWJ and the emoji presentation selector build emoji
# sequences (👩‍💻, ❤️): those stay in the stored text. The id ignores them too, so spellings
# with and without them (both common) are one sentence.
_JOINING_SCRIPTS = ("Arabic", "Syriac", "Nko", "Devanagari", "Bengali", "Gurmukhi", "Gujarati", "Oriya", "Tamil",
                    "Telugu", "Kannada", "Malayalam", "Sinhala")  # fmt: skip
_JOINING = regex.compile(  # Script_Extensions: Arabic vowel marks are "Inherited" by Script
    r"[[\p{L}\p{M}]&&[" + "".join(rf"\p{{scx={name}}}" for name in _JOINING_SCRIPTS) + "]]", flags=regex.V1
)
_PICTOGRAPH = regex.compile(r"[\p{Extended_Pictographic}\p{Emoji_Modifier}]")
_ZWNJ, _ZWJ, _TEXT_STYLE, _EMOJI_STYLE = "\u200c", "\u200d", "\ufe0e", "\ufe0f"


def _visible_part(run: regex.Match) -> str:
    """What of a run of ignorable characters changes how the text looks (usually nothing)."""
    text, start, end = run.string, run.start(), run.end()
    before = text[start - 1] if start else ""
    after = text[end] if end < len(text) else ""
    chars = run.group()
    if before and after and _JOINING.match(before) and _JOINING.match(after):
        return next((c for c in chars if c in (_ZWNJ, _ZWJ)), "")
    if before and _PICTOGRAPH.match(before):
        style = chars[0] if chars[0] in (_TEXT_STYLE, _EMOJI_STYLE) else ""
        joins = _ZWJ in chars and bool(after) and _PICTOGRAPH.match(after) is not None
        return style + (_ZWJ if joins else "")
    return ""


def normalize_text(text: str) -> str:
    """The form a sentence is stored in: ignorable characters removed (except bidi controls
    and the joiners above), then NFC and single spaces."""
    return " ".join(unicodedata.normalize("NFC", _DROPPED.sub(_visible_part, text)).split())


def id_text(text: str) -> str:
    """The form ids and comparisons are taken over: every ignorable character removed, then
    NFC and single spaces, so visually identical texts (NFC or NFD, with or without
    zero-width characters) are one text."""
    return " ".join(unicodedata.normalize("NFC", _IGNORABLE.sub("", text)).split())


def text_hash(text: str) -> str:
    return xxhash.xxh3_64_hexdigest(text.encode("utf-8"))


def sentence_id(text: str) -> str:
    return text_hash(id_text(text))


def file_hash(path: Path) -> str:
    digest = xxhash.xxh3_128()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def fingerprint(*parts: Any) -> str:
    """Hash of any JSON-able parts; order matters, dict key order does not."""
    return xxhash.xxh3_128_hexdigest(canonical_json(list(parts)).encode("utf-8"))


def dir_fingerprint(
    path: Path, suffixes: frozenset[str] = frozenset({".json", ".safetensors", ".bin", ".txt", ".model", ".spm"})
) -> str:
    """Content hash of a model directory's weights, configs and vocabularies."""
    digest = xxhash.xxh3_128()
    for file in sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in suffixes):
        digest.update(str(file.relative_to(path)).encode())
        digest.update(file_hash(file).encode())
    return digest.hexdigest()
