"""A corpus source as batches of lines for ingest: Arrow arrays from a reader that reads
batches itself (`Reader.batches`: text and Parquet files, no Python object per line), any
other reader's records grouped. Malformed records come between batches, where the reader met them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
from viewmill.augment.ingest.readers import READERS, RawLine, ReadOptions, Record
from viewmill.augment.ingest.source_files import Malformed

BATCH_RECORDS = 4096  # a reader's records grouped at most this many at a time


@dataclass(frozen=True)
class LineBatch:
    """Consecutive lines of one source as read: in an Arrow array (None when Arrow cannot hold
    them: lone surrogates), and with the records they came in for readers that give them."""

    file: str
    lines: pa.Array | None
    rows: np.ndarray
    records: list[RawLine] | None = None  # pair ids, labels, roles and reader rejections

    def texts(self, index: np.ndarray) -> list[str]:
        """The lines at `index` as Python strings."""
        if self.records is not None:
            return [self.records[i].text for i in index]
        assert self.lines is not None
        return self.lines.take(pa.array(index, pa.int64())).to_pylist()


Room = Callable[[], int]  # how many more records ingest may take (it stops when the corpus is full)


def line_batches(fmt: str, path: Path, options: ReadOptions, room: Room) -> Iterator[LineBatch | Malformed]:
    """The source's lines in batches: the reader's own (`Reader.batches`), else its records grouped
    no more than `room()` at a time, so ingest reads no record past the one it stops at."""
    reader = READERS[fmt]
    if reader.batches is not None:
        return reader.batches(path, options)
    return record_batches(reader(path, options), room)


def record_batches(records: Iterable[Record], room: Room) -> Iterator[LineBatch | Malformed]:
    batch: list[RawLine] = []
    for record in records:
        if batch and (isinstance(record, Malformed) or record.file != batch[0].file):
            yield _of_records(batch)
            batch = []
        if isinstance(record, Malformed):
            yield record
            continue
        batch.append(record)
        if len(batch) >= max(1, min(BATCH_RECORDS, room())):
            yield _of_records(batch)
            batch = []
    if batch:
        yield _of_records(batch)


def _of_records(records: list[RawLine]) -> LineBatch:
    try:
        lines: pa.Array | None = pa.array([record.text for record in records], pa.string())
    except (pa.ArrowException, UnicodeEncodeError):  # a lone surrogate: the Python lane reads these
        lines = None
    return LineBatch(records[0].file, lines, np.array([record.row for record in records], np.int64), records)
