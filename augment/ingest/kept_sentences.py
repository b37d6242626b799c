"""The sentences ingest keeps, a batch of lines at a time, and the counts of what it dropped.

A line is blank, rejected (unusable text, kept in `rejected_sentences`), too short, too long,
a duplicate of a kept sentence (same id), or kept. Plain lines are cleaned, counted and
hashed as Arrow arrays (`plain_text`); the others line by line with `clean`,
`sanitise.rejection` and `storage.ids.sentence_id`, as ingest always did.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from viewmill.augment.ingest.line_batches import LineBatch
from viewmill.augment.ingest.plain_text import SeenIds, fold_spaces, plain_rows, text_hashes, word_counts
from viewmill.augment.ingest.readers import READERS, Malformed
from viewmill.augment.ingest.sanitise import rejected_id, rejection, shown
from viewmill.storage.hex_ids import hex_ids
from viewmill.storage.ids import normalize_text, sentence_id
from viewmill.storage.schema import REJECTED_SENTENCES, SENTENCES

MAX_EXAMPLES = 10  # malformed records quoted in the run record
KEPT, BLANK, REJECTED, SHORT, LONG, DUPLICATE = range(6)
_ORIGIN = list(SENTENCES.field("origin").type)


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
class Cleaned:
    """A batch's lines cleaned: the plain ones folded in one Arrow array, the others in Python."""

    plain: np.ndarray  # which lines the Arrow lane cleaned
    folded: pa.Array | None  # every line with its whitespace folded (read only where plain)
    python: dict[int, str]  # the other lines' texts, by position

    def texts(self) -> list[str]:
        texts = self.folded.to_pylist() if self.folded is not None else [""] * len(self.plain)
        for at, text in self.python.items():
            texts[at] = text
        return texts


@dataclass
class KeptSentences:
    """The corpus's kept sentence rows (Arrow batches, taken as they come) and rejected texts,
    with the counts and the ids of every sentence kept so far."""

    corpus: str
    lang: str
    fmt: str
    run_id: str
    min_words: int
    max_words: int
    clean_text: Callable[[str], str]  # normalise and, when asked, detokenise one usable text
    plain_lane: bool
    stats: IngestStats = field(default_factory=IngestStats)
    batches: list[pa.RecordBatch] = field(default_factory=list)
    rejected: dict[str, dict] = field(default_factory=dict)
    seen: SeenIds = field(default_factory=SeenIds)

    def take(self) -> list[pa.RecordBatch]:
        """The rows kept since the last take (the caller writes them on; they are not held here)."""
        taken, self.batches = self.batches, []
        return taken

    def rejected_table(self) -> pa.Table:
        return pa.Table.from_pylist(list(self.rejected.values()), schema=REJECTED_SENTENCES)

    def clean(self, batch: LineBatch) -> Cleaned:
        """Normalise every line (invisible characters, NFC, whitespace), detokenising when asked;
        a reader's rejected text is normalised only."""
        plain = np.zeros(len(batch.rows), bool)
        if self.plain_lane and batch.lines is not None:
            plain = plain_rows(batch.lines)
        if batch.records is not None:
            plain &= np.array([record.rejected is None for record in batch.records])
        others = np.flatnonzero(~plain)
        python = {
            int(at): self.clean_text(text) if self._reader_reason(batch, at) is None else normalize_text(text)
            for at, text in zip(others, batch.texts(others), strict=True)
        }
        return Cleaned(plain, fold_spaces(batch.lines) if plain.any() else None, python)

    def add(self, batch: LineBatch, cleaned: Cleaned, room: int | None) -> None:
        """Keep the batch's new usable sentences of fitting length, at most `room` of them: the
        lines after the one that fills the corpus are not read (nor counted)."""
        status, words, reasons = self._status(batch, cleaned)
        status[(status == KEPT) & (words < self.min_words)] = SHORT
        status[(status == KEPT) & (words > self.max_words)] = LONG
        candidates = np.flatnonzero(status == KEPT)
        hashes = self._hashes(candidates, cleaned)
        new = self.seen.first_new(hashes)
        status[candidates[~new]] = DUPLICATE
        kept, hashes = candidates[new], hashes[new]
        end = len(status)
        if room is not None and len(kept) >= room:  # full at its room-th new sentence
            kept, hashes, end = kept[:room], hashes[:room], int(kept[room - 1]) + 1
        self.seen.add(hashes)
        self._count(batch, status[:end], {at: reason for at, reason in reasons.items() if at < end}, cleaned)
        if len(kept):
            self.batches.append(self._rows(batch, kept, hashes, cleaned))

    @staticmethod
    def _reader_reason(batch: LineBatch, at: int) -> str | None:
        return batch.records[at].rejected if batch.records is not None else None

    def _status(self, batch: LineBatch, cleaned: Cleaned) -> tuple[np.ndarray, np.ndarray, dict[int, str]]:
        """Blank, rejected (with the reason, by position) or kept so far; and word counts."""
        status = np.full(len(cleaned.plain), KEPT, np.int8)
        words = np.zeros(len(cleaned.plain), np.int64)
        if cleaned.folded is not None:
            blank = pc.equal(pc.binary_length(cleaned.folded), 0).to_numpy(zero_copy_only=False)
            status[cleaned.plain & blank] = BLANK
            words[cleaned.plain] = word_counts(cleaned.folded)[cleaned.plain]
        reasons = {}
        for at, text in cleaned.python.items():
            if not text:
                status[at] = BLANK
            elif reason := self._reader_reason(batch, at) or rejection(text, self.lang):
                status[at], reasons[at] = REJECTED, reason
            else:
                words[at] = len(text.split())
        return status, words, reasons

    def _hashes(self, candidates: np.ndarray, cleaned: Cleaned) -> np.ndarray:
        """The 64-bit ids (`sentence_id`'s hash) of the candidate lines."""
        hashes = np.empty(len(candidates), np.uint64)
        plain = cleaned.plain[candidates]
        if plain.any():
            assert cleaned.folded is not None
            hashes[plain] = text_hashes(cleaned.folded.take(pa.array(candidates[plain])))
        for at in np.flatnonzero(~plain):
            hashes[at] = int(sentence_id(cleaned.python[int(candidates[at])]), 16)
        return hashes

    def _count(self, batch: LineBatch, status: np.ndarray, reasons: dict[int, str], cleaned: Cleaned) -> None:
        stats = self.stats
        counts = np.bincount(status, minlength=6)
        stats.lines += len(status)
        stats.kept += int(counts[KEPT])
        stats.blank += int(counts[BLANK])
        stats.too_short += int(counts[SHORT])
        stats.too_long += int(counts[LONG])
        stats.duplicates += int(counts[DUPLICATE])
        for at, reason in reasons.items():
            stats.rejected[reason] = stats.rejected.get(reason, 0) + 1
            text = cleaned.python[at]
            row = {"corpus": self.corpus, "sentence_id": rejected_id(text), "text": shown(text, reason),
                   "length": len(text), "reason": reason, "file": batch.file, "row": int(batch.rows[at]),
                   "run_id": self.run_id}  # fmt: skip
            self.rejected.setdefault(row["sentence_id"], row)

    def _rows(self, batch: LineBatch, kept: np.ndarray, hashes: np.ndarray, cleaned: Cleaned) -> pa.RecordBatch:
        """The `sentences` rows of the kept lines."""
        count, plain = len(kept), cleaned.plain[kept]
        python = pa.array([cleaned.python[int(at)] for at in kept[~plain]], pa.string())
        texts = python
        if cleaned.folded is not None:
            texts = pc.replace_with_mask(cleaned.folded.take(pa.array(kept)), pa.array(~plain), python)
        records = batch.records or []
        origin = pa.StructArray.from_arrays(
            [
                _repeat(batch.file, count),
                pa.array(batch.rows[kept], pa.int64()),
                pa.array([records[at].pair_id for at in kept] if records else [None] * count, pa.string()),
                pa.array([records[at].nli_label for at in kept] if records else [None] * count, pa.string()),
            ],
            fields=_ORIGIN,
        )
        split = split_of(batch.file, self.fmt)
        columns = [self.corpus, hex_ids(hashes), texts, self.lang, split, origin, self.run_id]
        return pa.RecordBatch.from_arrays(
            [_repeat(column, count) if column is None or isinstance(column, str) else column for column in columns],
            schema=SENTENCES,
        )


def _repeat(value: str | None, count: int) -> pa.Array:
    return pa.repeat(pa.scalar(value, pa.string()), count)


def split_of(file: str, fmt: str) -> str | None:
    """The data split a file holds, as its format's reader names it (`Reader.split_of`:
    SentEval's suffix, s1.dev; else a split word in the name, snli_1.0_dev.jsonl)."""
    return READERS[fmt].split_of(file)
