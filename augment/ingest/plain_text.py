"""Ingest's vectorised lane: what Python would do line by line, on Arrow arrays of lines.

Most lines of a corpus are plain: printable ASCII, tabs, Latin letters with accents, curly
quotes and dashes. For such a line normalisation is folding whitespace (no character of it
is invisible, decomposes or composes with another in NFC, or is whitespace but tab and
space), the id's text is the stored text, and the checks of `sanitise.rejection` cannot
refuse it when it has no long token, is short enough and its language is written in Latin.
Those lines are cleaned, counted and hashed here a batch at a time; every other line goes
through the Python functions, so the result is theirs (tests/augment/ingest/test_ingest_batches.py
checks the character set against them).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash
from viewmill.augment.ingest.sanitise import MAX_SENTENCE_CHARS, MAX_TOKEN_CHARS, lang_scripts

# Code points of plain text beyond printable ASCII and tab: Latin-1 without NBSP and the soft
# hyphen, Latin Extended-A and -B, general punctuation without spaces, separators and
# invisible characters, the euro sign.
PLAIN_RANGES = ((0xA1, 0xAC), (0xAE, 0x24F), (0x2010, 0x2027), (0x2030, 0x205E), (0x20AC, 0x20AC))
_PLAIN = "^[\t\x20-\x7e" + "".join(rf"\x{{{low:x}}}-\x{{{high:x}}}" for low, high in PLAIN_RANGES) + "]*$"
_LONG_TOKEN = rf"[^\t ]{{{MAX_TOKEN_CHARS + 1},}}"


def plain_lane(lang: str, detokenize: bool) -> bool:
    """Whether plain lines of a corpus can skip the Python checks: not when they are detokenised
    (Moses), nor when the language is written in another script than Latin (the script check)."""
    scripts = lang_scripts(lang)
    return not detokenize and (scripts is None or "Latin" in scripts)


def plain_rows(lines: pa.Array) -> np.ndarray:
    """Which lines (a string array) are plain: neither rejected nor changed by more than folding
    spaces. Bytes are checked first; a regex reads only lines with other bytes than ASCII and
    lines long enough to hold a long token."""
    data, offsets = _utf8(lines)
    plain = np.ones(len(lines), bool)
    plain[_rows_with(offsets, ((data < 32) & (data != 9)) | (data == 127))] = False  # control characters
    for rows, pattern, wanted in (
        (np.flatnonzero(~pc.string_is_ascii(lines).to_numpy(zero_copy_only=False)), _PLAIN, True),
        (np.flatnonzero(np.diff(offsets) > MAX_TOKEN_CHARS), _LONG_TOKEN, False),  # more characters, more bytes
    ):
        if len(rows):
            found = pc.match_substring_regex(lines.take(pa.array(rows)), pattern).to_numpy(zero_copy_only=False)
            plain[rows] &= found == wanted
    return plain & (pc.utf8_length(lines).to_numpy(zero_copy_only=False) <= MAX_SENTENCE_CHARS)


def fold_spaces(lines: pa.Array) -> pa.Array:
    """`" ".join(line.split())` for lines whose only whitespace is tabs and spaces; the regex
    reads only the lines with a tab, two spaces running, or a space first or last."""
    data, offsets = _utf8(lines)
    space = data == 32
    rows = _rows_with(offsets, (data == 9) | np.append(space[:-1] & space[1:], False))
    filled = np.flatnonzero(np.diff(offsets) > 0)
    edges = filled[space[offsets[filled]] | space[offsets[filled + 1] - 1]]
    rows = np.union1d(rows, edges)
    if not len(rows):
        return lines
    folded = pc.utf8_trim(pc.replace_substring_regex(lines.take(pa.array(rows)), "[\t ]*\t[\t ]*|  +", " "), " ")
    mask = np.zeros(len(lines), bool)
    mask[rows] = True
    return pc.replace_with_mask(lines, pa.array(mask), folded)


def word_counts(texts: pa.Array) -> np.ndarray:
    """Words of single-spaced texts (`len(text.split())`): spaces + 1, right for non-empty texts."""
    data, offsets = _utf8(texts)
    spaces = np.append(data == 32, False).view(np.uint8)  # the last: where empty texts at the end start
    return np.add.reduceat(spaces, offsets[:-1], dtype=np.int64) + 1


def _utf8(lines: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """A string array's bytes and where each string starts in them (and the last ends)."""
    _, offsets_buffer, data_buffer = lines.buffers()
    offsets = np.frombuffer(offsets_buffer, np.int32)[lines.offset : lines.offset + len(lines) + 1].astype(np.int64)
    data = np.frombuffer(data_buffer, np.uint8) if data_buffer is not None else np.empty(0, np.uint8)
    return data[offsets[0] : offsets[-1]], offsets - offsets[0]


def _rows_with(offsets: np.ndarray, byte_mask: np.ndarray) -> np.ndarray:
    """The strings holding a byte of the mask."""
    return np.unique(np.searchsorted(offsets, np.flatnonzero(byte_mask), side="right") - 1)


def text_hashes(texts: pa.Array) -> np.ndarray:
    """xxh3-64 of each text's UTF-8 (the integer `storage.ids.text_hash` writes in hex)."""
    blobs = texts.cast(pa.binary()).to_pylist()
    return np.fromiter(map(xxhash.xxh3_64_intdigest, blobs), np.uint64, len(blobs))


class SeenIds:
    """The 64-bit ids kept so far, in an open-addressing hash table (linear probing, at most
    `MAX_LOAD` full; 8-16 bytes a sentence, where a Python set of hex ids takes some 150), looked
    up and filled a batch at a time. 0 marks an empty slot, so the id 0 is kept aside."""

    MAX_LOAD = 0.7

    def __init__(self, slots: int = 1 << 16) -> None:
        self._table = np.zeros(slots, np.uint64)
        self._count = 0
        self._zero = False

    def first_new(self, hashes: np.ndarray) -> np.ndarray:
        """Which of `hashes` are neither seen before nor repeats of an earlier one in the batch."""
        distinct, first = np.unique(hashes, return_index=True)
        new = np.zeros(len(hashes), bool)
        new[first[~self._contains(distinct)]] = True
        return new

    def add(self, hashes: np.ndarray) -> None:
        """Remember new, distinct hashes."""
        self._count += len(hashes)
        if self._count > self.MAX_LOAD * len(self._table):
            kept, size = self._table[self._table != 0], len(self._table)
            while self._count > self.MAX_LOAD * size:
                size *= 2
            self._table = np.zeros(0, np.uint64)  # the old table goes before the new one comes
            self._table = np.zeros(size, np.uint64)
            for start in range(0, len(kept), 1 << 20):  # a million at a time: small temporaries
                self._place(kept[start : start + (1 << 20)])
        self._zero |= bool((hashes == 0).any())
        self._place(hashes[hashes != 0])

    def values(self) -> np.ndarray:
        """Every id remembered, sorted (the order of their 16-digit hex forms)."""
        kept = self._table[self._table != 0]
        if self._zero:
            kept = np.concatenate([kept, np.zeros(1, np.uint64)])
        kept.sort()  # in place: no second copy of millions of ids
        return kept

    def _slots(self, keys: np.ndarray) -> np.ndarray:
        return (keys & np.uint64(len(self._table) - 1)).astype(np.intp)

    def _contains(self, keys: np.ndarray) -> np.ndarray:
        found = (keys == 0) & self._zero
        todo = np.flatnonzero(keys != 0)
        slots = self._slots(keys[todo])
        while len(todo):  # each key walks from its slot until it meets itself or an empty slot
            values = self._table[slots]
            hit = values == keys[todo]
            found[todo[hit]] = True
            going = (values != 0) & ~hit
            todo, slots = todo[going], (slots[going] + 1) % len(self._table)
        return found

    def _place(self, keys: np.ndarray) -> None:
        slots = self._slots(keys)
        while len(keys):  # keys claim empty slots; where several claim one, one wins, the rest walk on
            empty = self._table[slots] == 0
            self._table[slots[empty]] = keys[empty]
            placed = empty & (self._table[slots] == keys)
            keys, slots = keys[~placed], (slots[~placed] + 1) % len(self._table)
