"""Stable, content-derived identifiers."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path
from typing import Any

import xxhash


def normalize_text(text: str) -> str:
    """NFC and single spaces: the form every id and comparison is taken over."""
    return " ".join(unicodedata.normalize("NFC", text).split())


def text_hash(text: str) -> str:
    return xxhash.xxh3_64_hexdigest(text.encode("utf-8"))


def sentence_id(text: str) -> str:
    return text_hash(normalize_text(text))


def file_hash(path: Path) -> str:
    digest = xxhash.xxh3_128()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def fingerprint(*parts: Any) -> str:
    """Hash of any JSON-able parts; order matters, dict key order does not."""
    return xxhash.xxh3_128_hexdigest(canonical_json(list(parts)).encode("utf-8"))


def dir_fingerprint(
    path: Path, suffixes: frozenset[str] = frozenset({".json", ".safetensors", ".bin", ".txt", ".model", ".spm"})
) -> str:
    """Content hash of a model directory's weights, configs and vocabularies."""
    digest = xxhash.xxh3_128()
    for file in sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in suffixes):
        digest.update(str(file.relative_to(path)).encode())
        digest.update(file_hash(file).encode())
    return digest.hexdigest()
