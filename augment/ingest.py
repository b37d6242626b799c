"""Ingest: raw records from the readers in, normalised, deduplicated sentences out.

Lines come in batches (`line_batches`: Arrow arrays straight from text and Parquet files);
`KeptSentences` cleans, filters and dedupes a batch at a time, plain lines as Arrow arrays
and the others line by line, and holds the kept rows as Arrow record batches and their ids
as 64-bit hashes, so a corpus of millions of lines is read at hundreds of thousands a second.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
from sacremoses import MosesDetokenizer
from viewmill.augment.kept_sentences import Cleaned, IngestStats, KeptSentences
from viewmill.augment.line_batches import BATCH_RECORDS, LineBatch, line_batches
from viewmill.augment.plain_text import plain_lane
from viewmill.augment.readers import READERS, CorpusError, Malformed, RawLine, ReadOptions, require_file
from viewmill.augment.sanitise import rejection
from viewmill.storage.ids import normalize_text, sentence_id
from viewmill.storage.schema import NLI_PAIRS, REJECTED_SENTENCES

# Moses leaves Penn Treebank's split negations ("does n't", "ca n't") apart.
_SPLIT_NEGATION = re.compile(r"(\w) n't\b")


@dataclass
class IngestResult:
    sentences: pa.Table
    stats: IngestStats
    nli_pairs: pa.Table  # empty unless links were asked for and the format has them
    rejected: pa.Table = field(default_factory=lambda: REJECTED_SENTENCES.empty_table())


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
    on_error: str = "stop",
    options: ReadOptions | None = None,
) -> IngestResult:
    """Read, normalise (invisible characters, NFC, whitespace), optionally detokenise,
    reject unusable text, length-filter and dedupe.

    A malformed record stops the read with its file and line (`on_error="stop"`) or is
    skipped and counted (`"skip"`). With `nli_links`, also collect every labelled
    premise-hypothesis pair of NLI data (all of it: `limit` and the length filter apply to
    sentences, not to the links). Raises CorpusError if a source is missing or unreadable,
    or if nothing is left.
    """
    reader = READERS[fmt]
    if reader.reads_files:  # every source checked before any is read
        for path in files:
            require_file(Path(path))
    options = options or ReadOptions(lang=lang)
    clean = _cleaner(lang, detokenize)
    keep = KeptSentences(corpus, lang, fmt, run_id, min_words, max_words, clean, plain_lane(lang, detokenize))
    stats = keep.stats
    halves: dict[str, dict[str, tuple[str, RawLine]]] = {}

    def room() -> int:  # records ingest may still read before the corpus is full
        return BATCH_RECORDS if limit is None or nli_links else limit - stats.kept

    for path in files:
        kept_before = stats.kept
        for batch in line_batches(fmt, path, options, room):
            full = limit is not None and stats.kept >= limit
            if full and not nli_links:
                break
            if isinstance(batch, Malformed):
                _malformed(batch, on_error, None if full else stats)
                continue
            cleaned = keep.clean(batch)
            if nli_links:
                _batch_halves(batch, cleaned, halves)
            if not full:
                keep.add(batch, cleaned, None if limit is None else limit - stats.kept)
        stats.per_file[str(path)] = stats.kept - kept_before
    if nli_links:  # a premise file's hypotheses give its links even when not ingested themselves
        for path in reader.link_files(files):
            _read_halves(reader(path, options), clean, halves)
    if not stats.kept:
        raise CorpusError(_empty_corpus(corpus, len(files), stats, min_words, max_words))
    links = nli_pair_rows(corpus, halves, run_id)
    stats.nli_pairs = len(links)
    return IngestResult(keep.table(), stats, pa.Table.from_pylist(links, schema=NLI_PAIRS), keep.rejected_table())


def _malformed(raw: Malformed, on_error: str, stats: IngestStats | None) -> None:
    """Stop at a malformed record, or count it (in `stats`, unless the corpus is full)."""
    if on_error == "stop":
        raise CorpusError(f"{raw.describe()} (or set corpus.on_error: skip to skip and count such records)")
    if stats is not None:
        stats.skip(raw)


def _batch_halves(batch: LineBatch, cleaned: Cleaned, halves: dict) -> None:
    """Each premise and hypothesis of the batch, cleaned, under its pair id."""
    if batch.records is None:
        return
    for raw, text in zip(batch.records, cleaned.texts(), strict=True):
        if raw.pair_id is not None and raw.role is not None:
            halves.setdefault(raw.pair_id, {})[raw.role] = (text, raw)


def _read_halves(records: Iterable[RawLine | Malformed], clean: Callable[[str], str], halves: dict) -> None:
    for raw in records:
        if isinstance(raw, RawLine):
            halves.setdefault(raw.pair_id, {})[raw.role] = (clean(raw.text), raw)


# The fix for a corpus whose every sentence was rejected for one of these reasons.
_REJECTION_FIXES = {
    "wrong_script": "set corpus.lang to the language the corpus is written in",
    "paragraph_too_long": "separate the paragraphs with blank lines, or use format: text for one sentence a line",
}


def _empty_corpus(corpus: str, n_files: int, stats: IngestStats, min_words: int, max_words: int) -> str:
    fixes = [fix for reason, fix in _REJECTION_FIXES.items() if reason in stats.rejected]
    return (
        f"corpus '{corpus}' is empty after reading {n_files} file(s) "
        f"({stats.lines} lines, {stats.blank} blank, {stats.too_short} shorter than "
        f"{min_words} words, {stats.too_long} longer than {max_words}, {stats.malformed} malformed, "
        f"{sum(stats.rejected.values())} rejected as unusable text {stats.rejected or ''}): "
        + "; ".join([*fixes, "point corpus.files at non-empty files or relax corpus.min_words/max_words"])
    )


def _cleaner(lang: str, detokenize: bool) -> Callable[[str], str]:
    """Normalise (invisible characters, NFC, whitespace) and, when asked, detokenise usable text."""
    detok = MosesDetokenizer(lang=lang) if detokenize else None

    def clean(raw_text: str) -> str:
        text = normalize_text(raw_text)
        if text and detok is not None and rejection(text) is None:
            text = normalize_text(_SPLIT_NEGATION.sub(r"\1n't", detok.detokenize(text.split())))
        return text

    return clean


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
