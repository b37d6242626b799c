"""Ingest: raw records from the readers in, normalised, deduplicated sentences out.

Lines come in batches (`line_batches`: Arrow arrays straight from text and Parquet files);
`KeptSentences` cleans, filters and dedupes a batch at a time, plain lines as Arrow arrays
and the others line by line, and holds the kept rows as Arrow record batches and their ids
as 64-bit hashes, so a corpus of millions of lines is read at hundreds of thousands a second.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from sacremoses import MosesDetokenizer
from viewmill.augment.ingest.kept_sentences import Cleaned, IngestStats, KeptSentences
from viewmill.augment.ingest.line_batches import BATCH_RECORDS, LineBatch, line_batches
from viewmill.augment.ingest.plain_text import SeenIds, plain_lane
from viewmill.augment.ingest.readers import READERS, RawLine, ReadOptions
from viewmill.augment.ingest.sanitise import rejection
from viewmill.augment.ingest.source_files import CorpusError, Malformed, require_file
from viewmill.storage.ids import normalize_text, sentence_id
from viewmill.storage.schema import NLI_PAIRS, REJECTED_SENTENCES, SENTENCES

# Moses leaves Penn Treebank's split negations ("does n't", "ca n't") apart.
_SPLIT_NEGATION = re.compile(r"(\w) n't\b")


@dataclass
class IngestResult:
    sentences: pa.Table
    stats: IngestStats
    nli_pairs: pa.Table  # empty unless links were asked for and the format has them
    rejected: pa.Table = field(default_factory=lambda: REJECTED_SENTENCES.empty_table())


@dataclass(frozen=True)
class IngestSettings:
    corpus: str
    fmt: str
    lang: str
    detokenize: bool
    min_words: int
    max_words: int
    limit: int | None
    run_id: str
    nli_links: bool = False
    on_error: str = "stop"
    options: ReadOptions | None = None


class CorpusStream:
    """One read of a corpus: read, normalise (invisible characters, NFC, whitespace),
    optionally detokenise, reject unusable text, length-filter and dedupe.

    `batches()` yields the kept `sentences` rows as they are read, so a caller can write them
    on without holding the corpus; once it is exhausted, `stats`, `rejected()`, `nli_pairs` and
    `kept_ids()` describe the whole read. A malformed record stops the read with its file and
    line (`on_error="stop"`) or is skipped and counted (`"skip"`). With `nli_links`, also
    collect every labelled premise-hypothesis pair of NLI data (all of it: `limit` and the
    length filter apply to sentences, not to the links). Raises CorpusError if a source is
    missing or unreadable (before any is read), or if nothing is left.
    """

    def __init__(self, files: list[Path], settings: IngestSettings) -> None:
        self.files, self.settings = [Path(path) for path in files], settings
        self.reader = READERS[settings.fmt]
        if self.reader.reads_files:  # every source checked before any is read
            for path in self.files:
                require_file(path)
        self.options = settings.options or ReadOptions(lang=settings.lang)
        self.clean = _cleaner(settings.lang, settings.detokenize)
        lane = plain_lane(settings.lang, settings.detokenize)
        self.keep = KeptSentences(settings.corpus, settings.lang, settings.fmt, settings.run_id,
                                  settings.min_words, settings.max_words, self.clean, lane)  # fmt: skip
        self.stats = self.keep.stats
        self.nli_pairs = NLI_PAIRS.empty_table()
        self._kept_ids: np.ndarray | None = None
        self._started = False

    def batches(self) -> Iterator[pa.RecordBatch]:
        if self._started:
            raise RuntimeError("a CorpusStream reads its corpus once: make another for a second read")
        self._started = True
        limit, nli_links, stats = self.settings.limit, self.settings.nli_links, self.stats
        halves: dict[str, dict[str, tuple[str, RawLine]]] = {}

        def room() -> int:  # records ingest may still read before the corpus is full
            return BATCH_RECORDS if limit is None or nli_links else limit - stats.kept

        for path in self.files:
            kept_before = stats.kept
            for batch in line_batches(self.settings.fmt, path, self.options, room):
                full = limit is not None and stats.kept >= limit
                if full and not nli_links:
                    break
                if isinstance(batch, Malformed):
                    _malformed(batch, self.settings.on_error, None if full else stats)
                    continue
                cleaned = self.keep.clean(batch)
                if nli_links:
                    _batch_halves(batch, cleaned, halves)
                if not full:
                    self.keep.add(batch, cleaned, None if limit is None else limit - stats.kept)
                    yield from self.keep.take()
            stats.per_file[str(path)] = stats.kept - kept_before
        self._finish(halves)

    def _finish(self, halves: dict[str, dict[str, tuple[str, RawLine]]]) -> None:
        settings = self.settings
        if settings.nli_links:  # a premise file's hypotheses give its links even when not ingested themselves
            for path in self.reader.link_files(self.files):
                _read_halves(self.reader(path, self.options), self.clean, halves)
        if not self.stats.kept:
            raise CorpusError(_empty_corpus(settings, len(self.files), self.stats))
        links = nli_pair_rows(settings.corpus, halves, settings.run_id)
        self.stats.nli_pairs = len(links)
        self.nli_pairs = pa.Table.from_pylist(links, schema=NLI_PAIRS)

    def kept_ids(self) -> np.ndarray:
        """The 64-bit ids of every sentence kept, sorted; taken once the read is over (the
        stream lets go of its own table of them: at 10M sentences, 128 MiB)."""
        if self._kept_ids is None:
            self._kept_ids, self.keep.seen = self.keep.seen.values(), SeenIds()
        return self._kept_ids

    def rejected(self) -> pa.Table:
        return self.keep.rejected_table()


def ingest(files: list[Path], **settings: Any) -> IngestResult:
    """The corpus read whole (`CorpusStream` with these `IngestSettings`), kept rows in one table."""
    stream = CorpusStream(files, IngestSettings(**settings))
    sentences = pa.Table.from_batches(list(stream.batches()), schema=SENTENCES)
    return IngestResult(sentences, stream.stats, stream.nli_pairs, stream.rejected())


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
    "combining_mark_flood": "the file stacks more than 30 combining marks on a letter (Zalgo text): clean it first",
    "mixed_script_confusable": "words mix look-alike letters of two scripts (e.g. Cyrillic in Latin): check the "
    "file's encoding or its source (viewmill sql \"SELECT text FROM rejected_sentences\")",
}


def _empty_corpus(settings: IngestSettings, n_files: int, stats: IngestStats) -> str:
    corpus, min_words, max_words = settings.corpus, settings.min_words, settings.max_words
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
