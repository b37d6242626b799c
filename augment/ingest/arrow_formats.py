"""The text and Parquet formats' registry entries: records one by one (`read_text_file`,
`read_parquet`) and, for ingest, lines in Arrow arrays (`Reader.batches`): a block of a text
file or a Parquet batch at a time, no Python object per line."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from viewmill.augment.ingest.file_chunks import line_offsets
from viewmill.augment.ingest.line_batches import BATCH_RECORDS, LineBatch, record_batches
from viewmill.augment.ingest.readers import (
    RawLine,
    Reader,
    ReadOptions,
    not_text,
    open_parquet,
    read_parquet,
    read_text_file,
)
from viewmill.augment.ingest.source_files import Malformed, decode_line, require_file, require_utf8, source_chunks

PARQUET_BATCH = 65536


def text_batches(path: Path, options: ReadOptions) -> Iterator[LineBatch | Malformed]:
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


TEXT = Reader(read_text_file, batches=text_batches)
PARQUET = Reader(read_parquet, needs_text_column=True, batches=parquet_batches)
