"""Compressed corpora read as their text (issue 30, item 8): gzip, bzip2, xz and zstandard
copies of a corpus ingest to the same sentence ids, texts, rows and counts as the plain file,
known by their first bytes whatever their name; other compressions and damaged streams are
refused with the file and the fix, never a `iconv -f latin1` hint."""

from __future__ import annotations

import bz2
import gzip
import itertools
import json
import lzma
from dataclasses import asdict
from pathlib import Path

import pyarrow as pa
import pytest
from viewmill.augment.ingest import file_chunks
from viewmill.augment.ingest.corpus import CorpusError, ingest
from viewmill.augment.ingest.readers import ReadOptions

from tests.conftest import SENTENCES

LINES = [*SENTENCES, "", SENTENCES[0], "Ünïcödé têxt, ½ and “quotes” are kept.", "Too short", "w " * 40]


def _zstd(data: bytes, path: Path) -> None:
    with pa.output_stream(str(path), compression="zstd") as out:
        out.write(data)


COMPRESS = {
    "gzip": lambda data, path: path.write_bytes(gzip.compress(data)),
    "bzip2": lambda data, path: path.write_bytes(bz2.compress(data)),
    "xz": lambda data, path: path.write_bytes(lzma.compress(data)),
    "zstandard": _zstd,
}
SUFFIX = {"gzip": ".gz", "bzip2": ".bz2", "xz": ".xz", "zstandard": ".zst"}


def _corpus(fmt: str) -> bytes:
    if fmt == "nli-jsonl":
        rows = [{"sentence1": a, "sentence2": b, "gold_label": "neutral", "pairID": str(i)}
                for i, (a, b) in enumerate(itertools.pairwise(SENTENCES))]  # fmt: skip
        return "".join(json.dumps(row) + "\n" for row in rows).encode()
    if fmt == "csv":
        return ("text,id\n" + "".join(f'"{line}",{i}\n' for i, line in enumerate(LINES) if line)).encode()
    return ("\r\n".join(LINES) + "\n").encode()  # Windows breaks too: lines cut the same


def _ingested(path: Path, fmt: str):
    result = ingest([path], corpus="c", fmt=fmt, lang="en", detokenize=False, min_words=3, max_words=20,
                    limit=None, run_id="r", options=ReadOptions(text_column="text"))  # fmt: skip
    table = result.sentences
    rows = [origin["row"] for origin in table["origin"].to_pylist()]
    counts = {**asdict(result.stats), "per_file": list(result.stats.per_file.values())}  # the names differ
    return table["sentence_id"].to_pylist(), table["text"].to_pylist(), rows, counts


@pytest.mark.parametrize("fmt", ["text", "nli-jsonl", "csv"])
@pytest.mark.parametrize("kind", list(COMPRESS))
def test_a_compressed_corpus_ingests_as_its_plain_text(tmp_path, monkeypatch, fmt, kind):
    monkeypatch.setattr(file_chunks, "BLOCK_BYTES", 97)  # many blocks: lines cut across them
    data = _corpus(fmt)
    plain = tmp_path / f"corpus.{fmt}"
    plain.write_bytes(data)
    packed = tmp_path / f"corpus.{fmt}{SUFFIX[kind]}"
    COMPRESS[kind](data, packed)
    assert packed.read_bytes() != data
    ids, texts, rows, stats = _ingested(plain, fmt)
    assert len(ids) >= 15
    assert _ingested(packed, fmt) == (ids, texts, rows, stats)


def test_the_compression_is_known_by_its_bytes_not_its_name(tmp_path):
    data = _corpus("text")
    plain, disguised = tmp_path / "plain.txt", tmp_path / "corpus.txt"
    plain.write_bytes(data)
    disguised.write_bytes(gzip.compress(data))  # gzip without .gz: "not valid UTF-8, iconv -f latin1" before
    assert _ingested(disguised, "text") == _ingested(plain, "text")


def test_a_damaged_stream_is_named_with_the_file(tmp_path):
    cut = tmp_path / "corpus.txt.gz"
    cut.write_bytes(gzip.compress(_corpus("text") * 20)[:300])  # the download stopped
    with pytest.raises(CorpusError) as err:
        _ingested(cut, "text")
    assert str(err.value) == (
        f"{cut}: its gzip data is damaged (Compressed file ended before the end-of-stream marker was reached): "
        "fetch or compress the file again"
    )


@pytest.mark.parametrize(
    ("name", "head"),
    [("zip", b"PK\x03\x04"), ("lz4", b"\x04\x22\x4d\x18"), ("7-Zip", b"7z\xbc\xaf\x27\x1c")],
)
def test_another_compression_is_named_with_the_fix(tmp_path, name, head):
    archive = tmp_path / "corpus.bin"
    archive.write_bytes(head + b"\x00" * 64)
    with pytest.raises(CorpusError) as err:
        _ingested(archive, "text")
    assert str(err.value) == (
        f"{archive} is {name}-compressed: viewmill reads gzip, bzip2, xz and zstandard corpora as they are; extract "
        "or decompress it and point corpus.files at the text (or recompress it with gzip or zstd)"
    )


def test_a_compressed_parquet_file_is_named(tmp_path):
    packed = tmp_path / "corpus.parquet.gz"
    packed.write_bytes(gzip.compress(b"PAR1" + b"\x00" * 32))
    with pytest.raises(CorpusError) as err:
        _ingested(packed, "parquet")
    assert str(err.value) == f"{packed} is gzip-compressed: decompress it and point corpus.files at the Parquet file"
