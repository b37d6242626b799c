"""Sentence ids between their two forms: 16 lowercase hex digits (the lake's `sentence_id`,
`ids.text_hash`) and 64-bit values (what ingest dedupes and versions with), a whole Arrow
array at a time."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

_HEX = np.frombuffer(b"0123456789abcdef", np.uint8)


def hex_ids(hashes: np.ndarray) -> pa.Array:
    """The hashes as 16 lowercase hex digits, as `storage.ids.text_hash` gives them."""
    raw = hashes.astype(">u8").view(np.uint8).reshape(-1, 8)
    digits = np.empty((len(hashes), 16), np.uint8)
    digits[:, 0::2], digits[:, 1::2] = _HEX[raw >> 4], _HEX[raw & 15]
    offsets = np.arange(0, 16 * len(hashes) + 1, 16, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), len(hashes), [None, pa.py_buffer(offsets), pa.py_buffer(digits)])


_NIBBLE = np.full(256, 255, np.uint8)
_NIBBLE[_HEX] = np.arange(16, dtype=np.uint8)


def ids_of(texts: pa.Array) -> np.ndarray:
    """`hex_ids` undone: 16-digit lowercase hex ids back to their 64-bit values."""
    offsets = np.frombuffer(texts.buffers()[1], np.int32, len(texts) + 1, texts.offset * 4)
    if texts.null_count or (np.diff(offsets) != 16).any():
        raise ValueError("sentence ids must be 16 hex digits")
    data = np.frombuffer(texts.buffers()[2], np.uint8)[offsets[0] : offsets[-1]]
    nibbles = _NIBBLE[data]
    if (nibbles == 255).any():
        raise ValueError("sentence ids must be 16 lowercase hex digits")
    pairs = nibbles.reshape(-1, 8, 2)
    return ((pairs[:, :, 0] << 4) | pairs[:, :, 1]).copy().view(">u8").reshape(-1).astype(np.uint64)
