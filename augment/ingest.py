"""Corpus readers: files in, normalised, deduplicated sentences out."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
from sacremoses import MosesDetokenizer

from storage.ids import normalize_text, sentence_id
from storage.schema import NLI_PAIRS, SENTENCES

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
    role: str | None = None  # "premise" or "hypothesis" in NLI data


@dataclass
class IngestStats:
    lines: int = 0
    kept: int = 0
    duplicates: int = 0
    too_short: int = 0
    too_long: int = 0
    blank: int = 0
    nli_pairs: int = 0
    per_file: dict[str, int] = field(default_factory=dict)


@dataclass
class IngestResult:
    sentences: pa.Table
    stats: IngestStats
    nli_pairs: pa.Table  # empty unless links were asked for and the format has them


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
    role = {"s1": "premise", "s2": "hypothesis"}.get(path.stem)
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
        yield RawLine(line, str(path), row, pair_id=f"{split}:{row}", nli_label=label, role=role)


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
    nli_links: bool = False,
) -> IngestResult:
    """Read, normalise (NFC, whitespace), optionally detokenise, length-filter and dedupe.

    With `nli_links`, also collect every labelled premise-hypothesis pair of NLI data (all
    of it: `limit` and the length filter apply to sentences, not to the links).
    Raises CorpusError if a file is missing or unreadable, or if nothing is left.
    """
    reader = READERS[fmt]
    detok = MosesDetokenizer(lang=lang) if detokenize else None

    def clean(raw_text: str) -> str:
        text = normalize_text(raw_text)
        if text and detok is not None:
            text = normalize_text(_SPLIT_NEGATION.sub(r"\1n't", detok.detokenize(text.split())))
        return text

    stats = IngestStats()
    seen: set[str] = set()
    rows: list[dict] = []
    halves: dict[str, dict[str, tuple[str, RawLine]]] = {}
    for path in files:
        kept_before = stats.kept
        for raw in reader(path):
            full = limit is not None and stats.kept >= limit
            if full and not nli_links:
                break
            text = clean(raw.text)
            if nli_links and raw.pair_id is not None and raw.role is not None:
                halves.setdefault(raw.pair_id, {})[raw.role] = (text, raw)
            if full:
                continue
            stats.lines += 1
            if not text:
                stats.blank += 1
                continue
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
    if nli_links:  # a premise file's hypotheses give its links even when not ingested themselves
        for path in _partner_files(files, fmt):
            for raw in reader(path):
                halves.setdefault(raw.pair_id, {})[raw.role] = (clean(raw.text), raw)
    if not rows:
        raise CorpusError(
            f"corpus '{corpus}' is empty after reading {len(files)} file(s) "
            f"({stats.lines} lines, {stats.blank} blank, {stats.too_short} shorter than "
            f"{min_words} words, {stats.too_long} longer than {max_words}): "
            "point corpus.files at non-empty files or relax corpus.min_words/max_words"
        )
    links = nli_pair_rows(corpus, halves, run_id)
    stats.nli_pairs = len(links)
    return IngestResult(
        pa.Table.from_pylist(rows, schema=SENTENCES), stats, pa.Table.from_pylist(links, schema=NLI_PAIRS)
    )


def _partner_files(files: list[Path], fmt: str) -> list[Path]:
    if fmt != "senteval":
        return []
    listed = {Path(f).resolve() for f in files}
    partners = [Path(f).with_name("s2" + Path(f).suffix) for f in files if Path(f).stem == "s1"]
    return [p for p in partners if p.resolve() not in listed and p.is_file()]


def nli_pair_rows(corpus: str, halves: dict[str, dict[str, tuple[str, RawLine]]], run_id: str) -> list[dict]:
    """One row per pair with both sides non-empty and a gold label."""
    rows = []
    for pair_id, sides in halves.items():
        if "premise" not in sides or "hypothesis" not in sides:
            continue
        (premise, raw), (hypothesis, _) = sides["premise"], sides["hypothesis"]
        label = raw.nli_label
        if not premise or not hypothesis or label in (None, "", "-"):
            continue  # "-": annotators did not agree on a gold label
        rows.append(
            {
                "corpus": corpus,
                "pair_id": pair_id,
                "premise_id": sentence_id(premise),
                "premise_text": premise,
                "hypothesis_id": sentence_id(hypothesis),
                "hypothesis_text": hypothesis,
                "label": label,
                "file": raw.file,
                "row": raw.row,
                "run_id": run_id,
            }
        )
    return rows
