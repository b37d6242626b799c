"""Ingest: raw records from the readers in, normalised, deduplicated sentences out."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
from sacremoses import MosesDetokenizer
from viewmill.augment.readers import READERS, CorpusError, Malformed, RawLine, ReadOptions
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
    """Read, normalise (NFC, whitespace), optionally detokenise, length-filter and dedupe.

    A malformed record stops the read with its file and line (`on_error="stop"`) or is
    skipped and counted (`"skip"`). With `nli_links`, also collect every labelled
    premise-hypothesis pair of NLI data (all of it: `limit` and the length filter apply to
    sentences, not to the links). Raises CorpusError if a source is missing or unreadable,
    or if nothing is left.
    """
    reader = READERS[fmt]
    options = options or ReadOptions(lang=lang)
    detok = MosesDetokenizer(lang=lang) if detokenize else None

    def clean(raw_text: str) -> str:
        text = normalize_text(raw_text)
        if text and detok is not None and rejection(text) is None:
            text = normalize_text(_SPLIT_NEGATION.sub(r"\1n't", detok.detokenize(text.split())))
        return text

    stats = IngestStats()
    seen: set[str] = set()
    rows: list[dict] = []
    rejected: dict[str, dict] = {}
    halves: dict[str, dict[str, tuple[str, RawLine]]] = {}
    for path in files:
        kept_before = stats.kept
        for raw in reader(path, options):
            full = limit is not None and stats.kept >= limit
            if full and not nli_links:
                break
            if isinstance(raw, Malformed):
                if on_error == "stop":
                    raise CorpusError(f"{raw.describe()} (or set corpus.on_error: skip to skip and count such records)")
                if not full:
                    stats.skip(raw)
                continue
            text = clean(raw.text)
            if nli_links and raw.pair_id is not None and raw.role is not None:
                halves.setdefault(raw.pair_id, {})[raw.role] = (text, raw)
            if full:
                continue
            stats.lines += 1
            if not text:
                stats.blank += 1
                continue
            reason = rejection(text)
            if reason is not None:
                stats.rejected[reason] = stats.rejected.get(reason, 0) + 1
                rejected.setdefault(rejected_id(text), _rejected_row(corpus, text, reason, raw, run_id))
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
                    "split": split_of(raw.file, fmt),
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
            for raw in reader(path, options):
                if isinstance(raw, RawLine):
                    halves.setdefault(raw.pair_id, {})[raw.role] = (clean(raw.text), raw)
    if not rows:
        raise CorpusError(
            f"corpus '{corpus}' is empty after reading {len(files)} file(s) "
            f"({stats.lines} lines, {stats.blank} blank, {stats.too_short} shorter than "
            f"{min_words} words, {stats.too_long} longer than {max_words}, {stats.malformed} malformed, "
            f"{sum(stats.rejected.values())} rejected as unusable text {stats.rejected or ''}): "
            "point corpus.files at non-empty files or relax corpus.min_words/max_words"
        )
    links = nli_pair_rows(corpus, halves, run_id)
    stats.nli_pairs = len(links)
    return IngestResult(
        pa.Table.from_pylist(rows, schema=SENTENCES),
        stats,
        pa.Table.from_pylist(links, schema=NLI_PAIRS),
        pa.Table.from_pylist(list(rejected.values()), schema=REJECTED_SENTENCES),
    )


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
