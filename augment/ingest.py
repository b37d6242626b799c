"""Corpus readers: files in, normalised, deduplicated sentences out."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
from sacremoses import MosesDetokenizer

from storage.ids import normalize_text, sentence_id
from storage.schema import SENTENCES

# Moses leaves Penn Treebank's split negations ("does n't", "ca n't") apart.
_SPLIT_NEGATION = re.compile(r"(\w) n't\b")


class CorpusError(ValueError):
    """A corpus file cannot be used; the message names the file and the fix."""


@dataclass(frozen=True)
class RawLine:
    text: str
    file: str
    row: int  # 1-based line number
    pair_id: str | None = None
    nli_label: str | None = None


@dataclass
class IngestStats:
    lines: int = 0
    kept: int = 0
    duplicates: int = 0
    too_short: int = 0
    too_long: int = 0
    blank: int = 0
    per_file: dict[str, int] = field(default_factory=dict)


def read_lines(path: Path) -> list[str]:
    """All lines of a UTF-8 text file; a bad byte is reported with its line number."""
    if not path.is_file():
        raise CorpusError(f"corpus file not found: {path} (fix the path in the recipe's corpus.files)")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line_no = data.count(b"\n", 0, exc.start) + 1
        raise CorpusError(
            f"{path}:{line_no}: not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
            "re-encode the file as UTF-8, e.g. iconv -f latin1 -t utf-8"
        ) from None
    return text.removeprefix("\ufeff").splitlines()


def read_text_file(path: Path) -> Iterator[RawLine]:
    """One sentence per line."""
    for row, line in enumerate(read_lines(path), start=1):
        yield RawLine(line, str(path), row)


def read_senteval_nli(path: Path) -> Iterator[RawLine]:
    """SentEval NLI layout: a file of sentences (s1.* or s2.*) beside labels.* of equal length.

    The label is kept as origin metadata; pair ids are `<split>:<row>` so premise and
    hypothesis of one pair share an id.
    """
    lines = read_lines(path)
    split = path.suffix.lstrip(".") or "all"
    labels_path = path.with_name(f"labels{path.suffix}")
    labels: list[str | None] = [None] * len(lines)
    if labels_path.is_file():
        label_lines = read_lines(labels_path)
        if len(label_lines) != len(lines):
            raise CorpusError(
                f"{labels_path} has {len(label_lines)} lines but {path} has {len(lines)}: "
                "the SentEval layout needs one label per sentence line"
            )
        labels = [label.strip() or None for label in label_lines]
    for row, (line, label) in enumerate(zip(lines, labels, strict=True), start=1):
        yield RawLine(line, str(path), row, pair_id=f"{split}:{row}", nli_label=label)


READERS = {"text": read_text_file, "senteval": read_senteval_nli}


def ingest(
    files: list[Path],
    *,
    corpus: str,
    fmt: str,
    lang: str,
    detokenize: bool,
    min_words: int,
    max_words: int,
    limit: int | None,
    run_id: str,
) -> tuple[pa.Table, IngestStats]:
    """Read, normalise (NFC, whitespace), optionally detokenise, length-filter and dedupe.

    Raises CorpusError if a file is missing or unreadable, or if nothing is left.
    """
    reader = READERS[fmt]
    detok = MosesDetokenizer(lang=lang) if detokenize else None
    stats = IngestStats()
    seen: set[str] = set()
    rows: list[dict] = []
    for path in files:
        kept_before = stats.kept
        for raw in reader(path):
            if limit is not None and stats.kept >= limit:
                break
            stats.lines += 1
            text = normalize_text(raw.text)
            if not text:
                stats.blank += 1
                continue
            if detok is not None:
                text = normalize_text(_SPLIT_NEGATION.sub(r"\1n't", detok.detokenize(text.split())))
            n_words = len(text.split())
            if n_words < min_words:
                stats.too_short += 1
                continue
            if n_words > max_words:
                stats.too_long += 1
                continue
            sid = sentence_id(text)
            if sid in seen:
                stats.duplicates += 1
                continue
            seen.add(sid)
            stats.kept += 1
            rows.append(
                {
                    "corpus": corpus,
                    "sentence_id": sid,
                    "text": text,
                    "lang": lang,
                    "split": Path(raw.file).suffix.lstrip(".") or None,
                    "origin": {
                        "file": raw.file,
                        "row": raw.row,
                        "pair_id": raw.pair_id,
                        "nli_label": raw.nli_label,
                    },
                    "run_id": run_id,
                }
            )
        stats.per_file[str(path)] = stats.kept - kept_before
    if not rows:
        raise CorpusError(
            f"corpus '{corpus}' is empty after reading {len(files)} file(s) "
            f"({stats.lines} lines, {stats.blank} blank, {stats.too_short} shorter than "
            f"{min_words} words, {stats.too_long} longer than {max_words}): "
            "point corpus.files at non-empty files or relax corpus.min_words/max_words"
        )
    return pa.Table.from_pylist(rows, schema=SENTENCES), stats
