"""A file's lines read a block at a time, so memory stays flat however large the file is.

Lines break where `bytes.splitlines` breaks them (\\n, \\r\\n or a lone \\r), so the pieces,
each split on its own, give the lines of the whole file, numbered the same.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np

BLOCK_BYTES = 1 << 22  # 4 MiB
UTF8_BOM = b"\xef\xbb\xbf"


def line_chunks(source: Path | BinaryIO, block_bytes: int | None = None) -> Iterator[bytes]:
    """The file's bytes (or an open stream's, e.g. a decompressed one) in pieces that each end
    with a line break (the last: where the file ends), a UTF-8 byte-order mark at its start
    dropped; read `block_bytes` at a time."""
    block_bytes = block_bytes or BLOCK_BYTES
    with source.open("rb") if isinstance(source, Path) else contextlib.nullcontext(source) as handle:
        head = handle.read(len(UTF8_BOM))
        pending = [] if head == UTF8_BOM else [head]  # the start of a line that has not ended yet
        while block := handle.read(block_bytes):
            # A final \r may be the first half of \r\n: that line ends in the next block.
            end = max(block.rfind(b"\n"), block.rfind(b"\r", 0, len(block) - 1)) + 1
            if end:
                yield b"".join([*pending, block[:end]])
                pending = []
            pending.append(block[end:])
    if rest := b"".join(pending):
        yield rest


def line_offsets(chunk: bytes) -> np.ndarray:
    """Where each line of `chunk` starts, and where the last ends: a line holds its break."""
    data = np.frombuffer(chunk, np.uint8)
    ends = (data == 10) | (data == 13)
    ends[:-1] &= ~((data[:-1] == 13) & (data[1:] == 10))  # the \r of \r\n: the \n ends the line
    offsets = np.flatnonzero(ends) + 1
    if not len(offsets) or offsets[-1] != len(data):  # the file's last line, without a break
        offsets = np.append(offsets, len(data))
    return np.concatenate([[0], offsets])
