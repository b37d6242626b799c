"""Ingest a batch at a time (issue 24.8) gives what ingest line by line gave: the same sentences,
ids, rows, counts and rejected texts. The reference here is that line-by-line rule, written
out plainly from the public pieces (the readers' records, `normalize_text`, `rejection`,
`sentence_id`), and random corpora of awkward lines are read both ways."""

from __future__ import annotations

import json
import random
import unicodedata
from itertools import pairwise

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from viewmill.augment.ingest import file_chunks
from viewmill.augment.ingest.corpus import ingest
from viewmill.augment.ingest.file_chunks import line_chunks, line_offsets
from viewmill.augment.ingest.plain_text import PLAIN_RANGES, SeenIds, plain_rows, text_hashes
from viewmill.augment.ingest.readers import READERS, CorpusError, Malformed, ReadOptions
from viewmill.augment.ingest.sanitise import rejected_id, rejection, shown
from viewmill.storage.hex_ids import hex_ids
from viewmill.storage.ids import id_text, normalize_text, sentence_id, text_hash

PIECES = [
    "a", "cat", "The", "dog.", " ", "  ", "\t", "\x0b", "\x1c", "\x85", "\xa0", "\u2003", "\u200b", "\u200d", "\ufeff",
    "e\u0301", "\u00e9", "\u201c", "\u2019", "\u2014", "\x00", "\x7f", "\ufffd", "\ufdd0", "שלום", "Привет", "我喜欢",
    "x" * 101, "\u00ad", "\u0644\u200c\u0645", "\U0001f469\u200d\U0001f4bb", "\u00b5", "\u2028", "y" * 300,
]  # fmt: skip
PLAIN_WORDS = ["a", "cat", "The", "dog.", "caf\u00e9", "\u201cyes\u201d", "don\u2019t", "\u2014", "na\u00efve"]


def _line(rng: random.Random) -> str:
    words = rng.choice([0, 1, 2, 3, 5, 9, 14])
    pieces = [rng.choice(PIECES) if rng.random() < 0.3 else rng.choice(PLAIN_WORDS) for _ in range(words)]
    return "".join(piece + rng.choice([" ", " ", "", "\t"]) for piece in pieces)


def _corpus(rng: random.Random) -> list[str]:
    lines = [_line(rng) for _ in range(rng.randint(1, 80))]
    lines += [rng.choice(lines) for _ in range(15)]  # duplicates
    rng.shuffle(lines)
    return lines


def reference(records, lang: str, min_words: int, max_words: int, limit: int | None) -> tuple[list, dict, list]:
    """Ingest's rule, line by line: (sentence texts with ids and rows, counts, rejected rows)."""
    kept, seen, rejected = [], set(), {}
    counts = dict.fromkeys(("lines", "blank", "too_short", "too_long", "duplicates", "malformed"), 0)
    reasons: dict[str, int] = {}
    for record in records:
        if limit is not None and len(kept) >= limit:
            break
        if isinstance(record, Malformed):  # on_error: skip
            counts["malformed"] += 1
            continue
        text = normalize_text(record.text)
        counts["lines"] += 1
        reason = (record.rejected or rejection(text, lang)) if text else None
        words = len(text.split())
        if not text:
            counts["blank"] += 1
        elif reason:
            reasons[reason] = reasons.get(reason, 0) + 1
            rejected.setdefault(
                rejected_id(text), (rejected_id(text), shown(text, reason), len(text), reason, record.row)
            )
        elif words < min_words:
            counts["too_short"] += 1
        elif words > max_words:
            counts["too_long"] += 1
        elif sentence_id(text) in seen:
            counts["duplicates"] += 1
        else:
            seen.add(sentence_id(text))
            kept.append((sentence_id(text), text, record.row))
    return kept, {**counts, "rejected": reasons}, list(rejected.values())


def _both_ways(path, fmt: str, options: ReadOptions, **settings) -> None:
    expected = reference(READERS[fmt](path, options), options.lang, **settings)
    try:
        result = ingest([path], corpus="c", fmt=fmt, lang=options.lang, detokenize=False, run_id="r", on_error="skip",
                        options=options, **settings)  # fmt: skip
    except CorpusError:
        assert not expected[0], "ingest found nothing where the reference kept sentences"
        return
    rows = result.sentences.to_pylist()
    got = [(row["sentence_id"], row["text"], row["origin"]["row"]) for row in rows]
    stats = result.stats
    counts = {name: getattr(stats, name) for name in expected[1]}
    fields = ("sentence_id", "text", "length", "reason", "row")
    rejected = [tuple(row[name] for name in fields) for row in result.rejected.to_pylist()]
    assert (got, counts, rejected) == expected
    assert {row["corpus"] for row in rows} == {"c"} and stats.kept == len(rows)


@pytest.mark.parametrize("seed", range(6))
def test_text_parquet_and_book_corpora_read_in_batches_match_the_line_by_line_rule(tmp_path, monkeypatch, seed):
    monkeypatch.setattr(file_chunks, "BLOCK_BYTES", 97)  # many blocks: lines and \r\n cut across them
    rng = random.Random(seed)
    for trial in range(6):
        lines = _corpus(rng)
        settings = dict(min_words=rng.choice([1, 3]), max_words=rng.choice([4, 64]), limit=rng.choice([None, 2, 9]))
        options = ReadOptions(lang=rng.choice(["en", "he", "xx"]), text_column="text")
        text = tmp_path / f"{trial}.txt"
        body = "".join(line + rng.choice(["\n", "\r\n", "\r"]) for line in lines).encode()
        text.write_bytes(b"\xef\xbb\xbf" + body + (b"caf\xe9 latin-1\nlast line" if trial % 2 else b""))
        _both_ways(text, "text", options, **settings)
        parquet = tmp_path / f"{trial}.parquet"
        values = [line if rng.random() > 0.05 else None for line in lines]
        pq.write_table(pa.table({"text": values}), parquet, row_group_size=13)
        _both_ways(parquet, "parquet", options, **settings)
        book = tmp_path / f"{trial}.book"
        book.write_text("\n".join(line if rng.random() > 0.2 else "" for line in lines) + "\n", encoding="utf-8")
        _both_ways(book, "book", ReadOptions(lang="en"), **settings)


def test_nli_records_with_lone_surrogates_are_read_in_batches_as_one_by_one(tmp_path):
    records = [
        {"sentence1": f"A man plays guitar number {i}.", "sentence2": "Bad \ud800 half.", "gold_label": "neutral"}
        for i in range(3)
    ]
    path = tmp_path / "snli_dev.jsonl"
    path.write_text("\n".join(json.dumps(record) for record in records) + "\n{broken\n", encoding="utf-8")
    _both_ways(path, "nli-jsonl", ReadOptions(lang="en"), min_words=2, max_words=20, limit=None)


def test_plain_characters_are_kept_as_they_are_and_never_rejected():
    plain = [chr(c) for c in range(0x20, 0x7F)] + [chr(c) for low, high in PLAIN_RANGES for c in range(low, high + 1)]
    for char in plain:
        text = f"a{char}b"
        assert (normalize_text(text), id_text(text), rejection(text, "en")) == (text, text, None), hex(ord(char))
    letters = "".join(c for c in plain if not c.isspace())
    assert all(unicodedata.normalize("NFC", a + b) == a + b for a in letters for b in letters), "nothing composes"
    found = plain_rows(pa.array([letters[i : i + 50] for i in range(0, len(letters), 50)]))
    assert found.all(), "the regex takes every plain character"
    others = ["\xa0", "\xad", "\u0250", "\u0301", "\u200b", "\u2028", "\u205f", "\u0391", "\x07", "\x85", "\u3000"]
    assert not plain_rows(pa.array([f"a{c}b" for c in others])).any()
    assert list(plain_rows(pa.array(["x" * 100, "x" * 101, "y " * 500, "y " * 501]))) == [True, False, True, False]


def test_rejection_finds_the_first_bad_character_as_the_character_loop_did():
    def by_loop(text: str) -> str | None:
        for char in text:
            if unicodedata.category(char) == "Cc":
                return "control_characters"
            if unicodedata.category(char) == "Cs" or char == "\ufffd" or 0xFDD0 <= ord(char) <= 0xFDEF:
                return "invalid_unicode"
            if ord(char) & 0xFFFE == 0xFFFE:
                return "invalid_unicode"
        return None

    rng = random.Random(0)
    special = [0, 9, 0x1F, 0x7F, 0x9F, 0xA0, 0xD800, 0xDFFF, 0xFFFD, 0xFDD0, 0xFDEF, 0xFDF0, 0xFFFE, 0x1FFFF, 0x10FFFF]
    for _ in range(20_000):
        text = "".join(chr(rng.choice(special) if rng.random() < 0.3 else rng.randrange(0x110000)) for _ in range(4))
        found = rejection(text)
        assert (found if found in ("control_characters", "invalid_unicode") else None) == by_loop(text), ascii(text)


def test_line_chunks_split_into_the_lines_of_the_whole_file(tmp_path):
    rng = random.Random(0)
    path = tmp_path / "lines.bin"
    for _ in range(500):
        data = bytes(rng.choice(b"ab\r\n\xef\xbb\xbf") for _ in range(rng.randint(0, 30)))
        path.write_bytes(data)
        expected = data.removeprefix(b"\xef\xbb\xbf").splitlines()
        for block in (1, 2, 5, 64):
            chunks = list(line_chunks(path, block))
            assert [line for chunk in chunks for line in chunk.splitlines()] == expected
            pieces = [chunk[a:b].rstrip(b"\r\n") for chunk in chunks for a, b in pairwise(line_offsets(chunk))]
            assert pieces == expected


def test_seen_ids_answer_as_a_set_does_while_the_table_grows():
    rng = np.random.default_rng(0)
    seen, expected_seen = SeenIds(slots=4), set()
    for _ in range(200):
        batch = rng.choice(np.array([0, 1, 2**64 - 1, *rng.integers(0, 2**63, 40)], np.uint64), 30)
        values = batch.tolist()
        expected = [v not in expected_seen and v not in values[:i] for i, v in enumerate(values)]
        new = seen.first_new(batch)
        assert new.tolist() == expected
        seen.add(batch[new])
        expected_seen.update(batch[new].tolist())


def test_hashes_and_hex_ids_are_storage_ids():
    texts = ["", "A caf\u00e9.", "x" * 1000, "\u201cq\u201d"]
    assert hex_ids(text_hashes(pa.array(texts))).to_pylist() == [text_hash(t) for t in texts]
