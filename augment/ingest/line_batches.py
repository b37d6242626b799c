"""A corpus source as batches of lines for ingest: Arrow arrays straight from text and
Parquet files (no Python object per line), any other reader's records grouped. Malformed
records come between batches, where the reader met them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from viewmill.augment.ingest.file_chunks import line_offsets
from viewmill.augment.ingest.readers import READERS, RawLine, ReadOptions, Record, not_text, open_parquet
from viewmill.augment.ingest.source_files import Malformed, decode_line, require_file, require_utf8, source_chunks

BATCH_RECORDS = 4096  # a reader's records grouped at most this many at a time
PARQUET_BATCH = 65536


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
    """The source's lines in batches; a reader's records are grouped no more than `room()` at a
    time, so ingest reads no record past the one it stops at (as it did one by one)."""
    if fmt == "text":
        return text_batches(path)
    if fmt == "parquet":
        return parquet_batches(path, options)
    return record_batches(READERS[fmt](path, options), room)


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


def text_batches(path: Path) -> Iterator[LineBatch | Malformed]:
    """`read_text_file`'s lines, a block of the file at a time in one Arrow array."""
    require_file(path)
    require_utf8(path)
    row = 0
    for chunk in source_chunks(path):
        offsets = line_offsets(chunk)
        count = len(offsets) - 1
        lines = _utf8_lines(chunk, offsets)
        if lines is None:  # a line is not UTF-8: each read as `iter_lines` reads it
            decoded = (decode_line(path, at, raw) for at, raw in enumerate(chunk.splitlines(), start=row + 1))
            records = (
                line if isinstance(line, Malformed) else RawLine(line, str(path), at)
                for at, line in enumerate(decoded, start=row + 1)
            )
            yield from record_batches(records, lambda: BATCH_RECORDS)
        else:
            yield LineBatch(str(path), lines, np.arange(row + 1, row + count + 1))
        row += count


def _utf8_lines(chunk: bytes, offsets: np.ndarray) -> pa.Array | None:
    """The chunk's lines without their breaks, or None when one of them is not UTF-8."""
    big = len(chunk) >= 2**31
    kind, width = (pa.large_string(), np.int64) if big else (pa.string(), np.int32)
    buffers = [None, pa.py_buffer(offsets.astype(width)), pa.py_buffer(chunk)]
    lines = pa.Array.from_buffers(kind, len(offsets) - 1, buffers)
    try:
        lines.validate(full=True)
    except pa.ArrowInvalid:
        return None
    return pc.utf8_rtrim(lines, "\r\n").cast(pa.string())


def parquet_batches(path: Path, options: ReadOptions) -> Iterator[LineBatch | Malformed]:
    """`read_parquet`'s values: a batch of text values as it is, one with a null or another type
    value by value."""
    parquet, column = open_parquet(path, options)
    row = 0
    for batch in parquet.iter_batches(columns=[column], batch_size=PARQUET_BATCH):
        values = batch.column(0)
        if (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)) and not values.null_count:
            yield LineBatch(str(path), values.cast(pa.string()), np.arange(row + 1, row + len(values) + 1))
        else:
            records = (
                RawLine(value, str(path), at) if isinstance(value, str) else not_text(path, at, column, value)
                for at, value in enumerate(values.to_pylist(), start=row + 1)
            )
            yield from record_batches(records, lambda: BATCH_RECORDS)
        row += len(values)
