"""A corpus source as a file: a regular one (what else it is, named, where not), compressed
or not (gzip, bzip2, xz and zstandard read as their text, as DuckDB's and datatrove's readers
do, known by their first bytes), UTF-8 (a UTF-16 file refused as a whole, with the
conversion), its lines decoded one by one (a line that is not UTF-8 is Malformed, with its
place). The errors readers and ingest report."""

from __future__ import annotations

import bz2
import gzip
import lzma
import stat
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from viewmill.augment.ingest.file_chunks import line_chunks
from viewmill.storage.datasets.fetching import missing_hint

from viewmill.paths import leads_nowhere, nowhere


class CorpusError(ValueError):
    """A corpus cannot be used; the message names the file and the fix."""


@dataclass(frozen=True)
class Malformed:
    file: str
    row: int
    reason: str

    def describe(self) -> str:
        return f"{self.file}:{self.row}: {self.reason}"


# What a path that is not a regular file is, for the message (a read would hang or never end).
_NOT_A_FILE = (
    (stat.S_ISDIR, "a folder, not a file: list the files inside it in corpus.files"),
    (stat.S_ISCHR, "a character device (like /dev/zero or a terminal), not a file: reading it never ends or "
                   "waits for input; point corpus.files at a regular file"),
    (stat.S_ISBLK, "a block device, not a file: point corpus.files at a regular file"),
    (stat.S_ISFIFO, "a named pipe (FIFO), not a file: a run reads its corpus more than once (the checks, then "
                    "ingest), so write the pipe's content to a regular file and point corpus.files at it"),
    (stat.S_ISSOCK, "a socket, not a file: point corpus.files at a regular file"),
)  # fmt: skip


def require_file(path: Path) -> None:
    """A corpus source must be a regular file (or a link to one); the message says what it is instead."""
    if leads_nowhere(path):  # a loop (in any part of the path), or a link to nothing
        raise CorpusError(nowhere("corpus file", path, "point corpus.files at the real file"))
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        fix = missing_hint(path) or " (fix the path in the recipe's corpus.files)"
        raise CorpusError(f"corpus file not found: {path}{fix}") from None
    except OSError as exc:
        raise CorpusError(f"corpus file {path} cannot be read ({exc.strerror}): fix its path or permissions") from None
    for is_kind, what in _NOT_A_FILE:
        if is_kind(mode):
            raise CorpusError(f"corpus file {path} is {what}")
    if not stat.S_ISREG(mode):
        raise CorpusError(f"corpus file {path} is not a regular file: point corpus.files at one")


def _zstd(path: Path) -> BinaryIO:
    import pyarrow as pa

    if not pa.Codec.is_available("zstd"):
        raise CorpusError(
            f"{path} is zstandard-compressed and this pyarrow has no zstd codec: decompress it (zstd -d {path}) "
            "and point corpus.files at the text, or install pyarrow's own wheel"
        )
    return pa.input_stream(str(path), compression="zstd")


# A compressed file's first bytes -> its name and how to read it (None: named, with the fix).
_COMPRESSIONS: tuple[tuple[bytes, str, Callable[[Path], BinaryIO] | None], ...] = (
    (b"\x1f\x8b", "gzip", gzip.GzipFile),
    (b"BZh", "bzip2", bz2.BZ2File),
    (b"\xfd7zXZ\x00", "xz", lzma.LZMAFile),
    (b"\x28\xb5\x2f\xfd", "zstandard", _zstd),
    (b"PK\x03\x04", "zip", None),
    (b"\x04\x22\x4d\x18", "lz4", None),
    (b"7z\xbc\xaf\x27\x1c", "7-Zip", None),
)
# What a damaged compressed stream raises while it is read.
DAMAGED = (EOFError, OSError, zlib.error, lzma.LZMAError)


def compression_of(path: Path) -> str | None:
    """The compression `path` is in, by its first bytes (not its name), or None for plain bytes."""
    with path.open("rb") as handle:
        head = handle.read(6)
    return next((name for magic, name, _ in _COMPRESSIONS if head.startswith(magic)), None)


def open_source(path: Path) -> BinaryIO:
    """The file's bytes, decompressed when it is gzip, bzip2, xz or zstandard; another
    compression or archive is refused with the way to read it."""
    name = compression_of(path)
    if name is None:
        return path.open("rb")
    opener = next(opener for _, known, opener in _COMPRESSIONS if known == name)
    if opener is None:
        raise CorpusError(
            f"{path} is {name}-compressed: viewmill reads gzip, bzip2, xz and zstandard corpora as they are; "
            f"extract or decompress it and point corpus.files at the text (or recompress it with gzip or zstd)"
        )
    return opener(path)


def damaged(path: Path, exc: BaseException) -> CorpusError:
    """The error for a compressed file whose data ends early or is corrupt."""
    return CorpusError(
        f"{path}: its {compression_of(path)} data is damaged ({exc or type(exc).__name__}): fetch or compress the "
        "file again"
    )


def source_chunks(path: Path) -> Iterator[bytes]:
    """`line_chunks` of the file's text, decompressed where it is compressed."""
    with open_source(path) as handle:
        try:
            yield from line_chunks(handle)
        except DAMAGED as exc:
            if compression_of(path) is None:
                raise  # a plain file's read error is no damaged stream
            raise damaged(path, exc) from None


# Byte-order marks, the longer first (UTF-32LE's starts with UTF-16LE's).
_BOMS = {
    b"\xff\xfe\x00\x00": "UTF-32LE", b"\x00\x00\xfe\xff": "UTF-32BE",
    b"\xff\xfe": "UTF-16LE", b"\xfe\xff": "UTF-16BE",
}  # fmt: skip


def utf16_encoding(head: bytes) -> tuple[str, str] | None:
    """(encoding, evidence) when the first bytes of a file are UTF-16 (or UTF-32) text, else
    None: a byte-order mark, or NUL in every other byte (ASCII text in UTF-16 without a mark;
    UTF-8 text never looks like that, a NUL in it is one bad line)."""
    for bom, encoding in _BOMS.items():
        if head.startswith(bom):
            return encoding, f"it starts with the {encoding[:6]} byte-order mark {bom.hex(' ').upper()}"
    pairs = len(head) // 2
    if pairs < 4:
        return None
    odd, even = head[1 : 2 * pairs : 2].count(0), head[0 : 2 * pairs : 2].count(0)
    for nuls, others, encoding in ((odd, even, "UTF-16LE"), (even, odd, "UTF-16BE")):
        if nuls >= 0.9 * pairs and others == 0:
            return encoding, "every other byte is NUL"
    return None


def require_utf8(path: Path) -> None:
    """Refuse a UTF-16 file as a whole, naming the conversion, instead of one confusing bad line."""
    with open_source(path) as handle:
        try:
            found = utf16_encoding(handle.read(4096))
        except DAMAGED as exc:
            raise damaged(path, exc) from None
    if found is not None:
        encoding, evidence = found
        converted = path.with_name(f"{path.stem}.utf8{path.suffix}")
        if compression_of(path) is not None:  # the text is inside: convert what decompressing gives
            raise CorpusError(f"{path} holds {encoding} text ({evidence}), not UTF-8: convert what it decompresses "
                              f"to with iconv -f {encoding[:6]} -t UTF-8 and point corpus.files at that")  # fmt: skip
        source = encoding[:6] if "mark" in evidence else encoding  # iconv reads the mark itself
        raise CorpusError(
            f"{path} is {encoding} text ({evidence}), not UTF-8: convert it with "
            f"iconv -f {source} -t UTF-8 {path} > {converted} and point corpus.files at {converted}"
        )


def iter_lines(path: Path) -> Iterator[tuple[int, str | Malformed]]:
    """(line number, text) for each line, the file read a block at a time; a line that is not
    UTF-8 comes as Malformed."""
    require_file(path)
    require_utf8(path)
    row = 0
    for chunk in source_chunks(path):
        for raw in chunk.splitlines():
            row += 1
            yield row, decode_line(path, row, raw)


def decode_line(path: Path, row: int, raw: bytes) -> str | Malformed:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Malformed(
            str(path), row,
            f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1}); "
            "re-encode the file as UTF-8, e.g. iconv -f latin1 -t utf-8",
        )  # fmt: skip


def read_lines(path: Path) -> list[str]:
    """All lines of a UTF-8 file, for structural files (labels) where a bad line is fatal."""
    lines = []
    for _, line in iter_lines(path):
        if isinstance(line, Malformed):
            raise CorpusError(line.describe())
        lines.append(line)
    return lines
