"""Ingest: raw records from the readers in, normalised, deduplicated sentences out."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
from sacremoses import MosesDetokenizer
from viewmill.augment.readers import FILE_FORMATS, READERS, CorpusError, Malformed, RawLine, ReadOptions, require_file
from viewmill.augment.sanitise import rejected_id, rejection, shown
from viewmill.storage.ids import normalize_text, sentence_id
from viewmill.storage.schema import NLI_PAIRS, REJECTED_SENTENCES, SENTENCES

# Moses leaves Penn Treebank's split negations ("does n't", "ca n't") apart.
_SPLIT_NEGATION = re.compile(r"(\w) n't\b")


MAX_EXAMPLES = 10  # malformed records quoted in the run record


@dataclass
class IngestStats:
    lines: int = 0
    kept: int = 0
    duplicates: int = 0
    too_short: int = 0
    too_long: int = 0
    blank: int = 0
    malformed: int = 0
    malformed_examples: list[str] = field(default_factory=list)
    nli_pairs: int = 0
    rejected: dict[str, int] = field(default_factory=dict)  # reason -> sentences (kept in rejected_sentences)
    per_file: dict[str, int] = field(default_factory=dict)

    def skip(self, record: Malformed) -> None:
        self.malformed += 1
        if len(self.malformed_examples) < MAX_EXAMPLES:
            self.malformed_examples.append(record.describe())


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
    if fmt in FILE_FORMATS:  # every source checked before any is read
        for path in files:
            require_file(Path(path))
    options = options or ReadOptions(lang=lang)
    clean = _cleaner(lang, detokenize)
    keep = _Sentences(corpus, lang, fmt, run_id, min_words, max_words)
    stats = keep.stats
    halves: dict[str, dict[str, tuple[str, RawLine]]] = {}
    for path in files:
        kept_before = stats.kept
        for raw in reader(path, options):
            full = limit is not None and stats.kept >= limit
            if full and not nli_links:
                break
            if isinstance(raw, Malformed):
                _malformed(raw, on_error, None if full else stats)
                continue
            text = clean(raw.text) if raw.rejected is None else normalize_text(raw.text)
            if nli_links and raw.pair_id is not None and raw.role is not None:
                halves.setdefault(raw.pair_id, {})[raw.role] = (text, raw)
            if not full:
                keep.add(text, raw)
        stats.per_file[str(path)] = stats.kept - kept_before
    if nli_links:  # a premise file's hypotheses give its links even when not ingested themselves
        for path in _partner_files(files, fmt):
            _read_halves(reader(path, options), clean, halves)
    if not keep.rows:
        raise CorpusError(_empty_corpus(corpus, len(files), stats, min_words, max_words))
    links = nli_pair_rows(corpus, halves, run_id)
    stats.nli_pairs = len(links)
    return IngestResult(
        pa.Table.from_pylist(keep.rows, schema=SENTENCES),
        stats,
        pa.Table.from_pylist(links, schema=NLI_PAIRS),
        pa.Table.from_pylist(list(keep.rejected.values()), schema=REJECTED_SENTENCES),
    )


def _malformed(raw: Malformed, on_error: str, stats: IngestStats | None) -> None:
    """Stop at a malformed record, or count it (in `stats`, unless the corpus is full)."""
    if on_error == "stop":
        raise CorpusError(f"{raw.describe()} (or set corpus.on_error: skip to skip and count such records)")
    if stats is not None:
        stats.skip(raw)


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


@dataclass
class _Sentences:
    """The corpus's kept sentence rows and rejected texts, with the counts of what was dropped."""

    corpus: str
    lang: str
    fmt: str
    run_id: str
    min_words: int
    max_words: int
    stats: IngestStats = field(default_factory=IngestStats)
    seen: set[str] = field(default_factory=set)
    rows: list[dict] = field(default_factory=list)
    rejected: dict[str, dict] = field(default_factory=dict)

    def add(self, text: str, raw: RawLine) -> None:
        """Keep a cleaned line unless it is blank, unusable, too short or long, or a duplicate."""
        stats = self.stats
        stats.lines += 1
        if not text:
            stats.blank += 1
            return
        reason = raw.rejected or rejection(text, self.lang)
        if reason is not None:
            stats.rejected[reason] = stats.rejected.get(reason, 0) + 1
            self.rejected.setdefault(rejected_id(text), _rejected_row(self.corpus, text, reason, raw, self.run_id))
            return
        n_words = len(text.split())
        if n_words < self.min_words:
            stats.too_short += 1
            return
        if n_words > self.max_words:
            stats.too_long += 1
            return
        sid = sentence_id(text)
        if sid in self.seen:
            stats.duplicates += 1
            return
        self.seen.add(sid)
        stats.kept += 1
        origin = {"file": raw.file, "row": raw.row, "pair_id": raw.pair_id, "nli_label": raw.nli_label}
        self.rows.append({"corpus": self.corpus, "sentence_id": sid, "text": text, "lang": self.lang,
                          "split": split_of(raw.file, self.fmt), "origin": origin, "run_id": self.run_id})  # fmt: skip


def _rejected_row(corpus: str, text: str, reason: str, raw: RawLine, run_id: str) -> dict:
    return {"corpus": corpus, "sentence_id": rejected_id(text), "text": shown(text), "length": len(text),
            "reason": reason, "file": raw.file, "row": raw.row, "run_id": run_id}  # fmt: skip


_SPLIT_IN_NAME = re.compile(r"(?:^|[_.-])(train|dev|test|validation)(_matched|_mismatched)?(?:$|[_.-])")


def split_of(file: str, fmt: str) -> str | None:
    """The data split a file holds: SentEval's suffix (s1.dev), else a split word in the
    name (snli_1.0_dev.jsonl, dev_matched), else none."""
    path = Path(file)
    if fmt == "senteval":
        return path.suffix.lstrip(".") or None
    found = _SPLIT_IN_NAME.search(path.name)
    return "".join(part for part in found.groups() if part) if found else None


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
