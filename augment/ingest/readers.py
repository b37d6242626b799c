"""Corpus readers: each turns one source into raw sentences (with origins) and reports
malformed records instead of failing on them; `ingest` applies the recipe's policy."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from viewmill.augment.ingest.source_files import (
    DAMAGED,
    CorpusError,
    Malformed,
    compression_of,
    damaged,
    iter_lines,
    open_source,
    read_lines,
    require_file,
    require_utf8,
)

from viewmill.registry import Registry, RegistryError

if TYPE_CHECKING:
    import pyarrow.parquet as pq


@dataclass(frozen=True)
class RawLine:
    text: str
    file: str
    row: int  # 1-based line (or record) number
    pair_id: str | None = None
    nli_label: str | None = None
    role: str | None = None  # "premise" or "hypothesis" in NLI data
    rejected: str | None = None  # a reason the reader already refuses the text for (kept, counted)


@dataclass(frozen=True)
class ReadOptions:
    lang: str = "en"
    text_column: str | None = None  # csv, parquet, hf
    split: str = "train"  # hf
    config: str | None = None  # hf


Record = RawLine | Malformed
_SPLIT_IN_NAME = re.compile(r"(?:^|[_.-])(train|dev|test|validation)(_matched|_mismatched)?(?:$|[_.-])")


def split_in_name(file: str) -> str | None:
    """The data split a split word in the file name gives (snli_1.0_dev.jsonl, dev_matched), else none."""
    found = _SPLIT_IN_NAME.search(Path(file).name)
    return "".join(part for part in found.groups() if part) if found else None


def _no_link_files(files: list[Path]) -> list[Path]:
    return []


@dataclass(frozen=True)
class Reader:
    """A corpus format, the registry's entry: `read(source, options)` yielding records, and
    what ingest and the recipe rely on (a plugin sets them as viewmill's own formats do)."""

    read: Callable[[Path, ReadOptions], Iterator[Record]]
    # Every source is a regular file, checked before any is read. Otherwise a source may be a
    # name the reader resolves itself (a hub id), kept as written unless it is a path beside the recipe.
    reads_files: bool = True
    needs_text_column: bool = False  # the text is in the column corpus.text_column names
    yields_nli_pairs: bool = False  # records carry pair_id, role and nli_label: entailment views, NLI negatives
    split_of: Callable[[str], str | None] = split_in_name  # the data split a source holds
    link_files: Callable[[list[Path]], list[Path]] = _no_link_files  # files read only for the sources' NLI pairs
    # Ingest's fast path: the source's lines as `line_batches.LineBatch`es (Arrow arrays) and
    # `Malformed` records between them, read as `read` reads them; None: `read`'s records, grouped.
    batches: Callable[[Path, ReadOptions], Iterator[object]] | None = None

    def __call__(self, path: Path, options: ReadOptions) -> Iterator[Record]:
        return self.read(path, options)


def read_text_file(path: Path, options: ReadOptions) -> Iterator[Record]:
    """One sentence per line."""
    for row, line in iter_lines(path):
        yield line if isinstance(line, Malformed) else RawLine(line, str(path), row)


def read_senteval_nli(path: Path, options: ReadOptions) -> Iterator[Record]:
    """SentEval NLI layout: a file of sentences (s1.* or s2.*) beside labels.* of equal length.

    The label is kept as origin metadata; pair ids are `<split>:<row>` so premise and
    hypothesis of one pair share an id.
    """
    lines = list(iter_lines(path))
    split = path.suffix.lstrip(".") or "all"
    role = {"s1": "premise", "s2": "hypothesis"}.get(path.stem)
    labels_path = path.with_name(f"labels{path.suffix}")
    labels: list[str | None] = [None] * len(lines)
    if labels_path.is_file():
        label_lines = read_lines(labels_path)
        if len(label_lines) != len(lines):
            raise CorpusError(
                f"{labels_path} has {len(label_lines)} lines but {path} has {len(lines)}: "
                "the SentEval layout needs one label per sentence line"
            )
        labels = [label.strip() or None for label in label_lines]
    for (row, line), label in zip(lines, labels, strict=True):
        if isinstance(line, Malformed):
            yield line
        else:
            yield RawLine(line, str(path), row, pair_id=f"{split}:{row}", nli_label=label, role=role)


def read_nli_jsonl(path: Path, options: ReadOptions) -> Iterator[Record]:
    """SNLI and MultiNLI in their official jsonl form: sentence1, sentence2, gold_label
    (and pairID); each record gives a premise and a hypothesis."""
    for row, line in iter_lines(path):
        if isinstance(line, Malformed):
            yield line
            continue
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            yield Malformed(str(path), row, f"not a JSON object ({exc.msg} at column {exc.colno})")
            continue
        if not isinstance(record, dict) or not all(isinstance(record.get(k), str) for k in ("sentence1", "sentence2")):
            yield Malformed(str(path), row, "a record needs string fields sentence1 and sentence2")
            continue
        pair_id = str(record.get("pairID") or f"{path.name}:{row}")
        label = record.get("gold_label") or None
        for role, key in (("premise", "sentence1"), ("hypothesis", "sentence2")):
            yield RawLine(record[key], str(path), row, pair_id=pair_id, nli_label=label, role=role)


def _text_column(options: ReadOptions, fmt: str) -> str:
    if not options.text_column:
        raise CorpusError(f"format {fmt} needs corpus.text_column: the name of the column that holds the text")
    return options.text_column


def _missing_column(path: Path | str, column: str, available: list[str]) -> CorpusError:
    return CorpusError(
        f"{path} has no column '{column}' (columns: {', '.join(available)}): set corpus.text_column to one of them"
    )


def read_csv(path: Path, options: ReadOptions) -> Iterator[Record]:
    """CSV with a header row; the text is in `text_column`.

    Parsed strictly: a quote left open (which would swallow the records after it) stops
    the read with the line it opened on, and a record running over several lines is
    malformed (a sentence corpus has none; it is how an unbalanced quote shows).
    """
    column = _text_column(options, "csv")
    require_file(path)
    require_utf8(path)
    start = 1
    try:
        with io.TextIOWrapper(open_source(path), encoding="utf-8", newline="") as handle:
            reader = csv.DictReader(handle, strict=True)
            if reader.fieldnames is None or column not in reader.fieldnames:
                raise _missing_column(path, column, list(reader.fieldnames or []))
            start = reader.line_num + 1
            for record in reader:
                row, end, start = start, reader.line_num, reader.line_num + 1
                value = record.get(column)
                if end > row:
                    yield Malformed(
                        str(path), row, f"one record runs over lines {row}-{end}: an unbalanced quote? "
                        "close it, or double a quote inside a quoted field (\"\")",
                    )  # fmt: skip
                elif None in record or value is None:
                    yield Malformed(str(path), row, f"expected {len(reader.fieldnames)} fields, got another count")
                else:
                    yield RawLine(value, str(path), row)
    except UnicodeDecodeError as exc:
        raise CorpusError(f"{path}: not valid UTF-8 ({exc.reason}); re-encode it, e.g. iconv -t utf-8") from None
    except DAMAGED as exc:
        raise damaged(path, exc) from None
    except csv.Error as exc:
        raise CorpusError(
            f"{path}:{start}: CSV cannot be parsed from this line on ({exc}): a quote opened here is never closed? "
            'close it, or double a quote inside a quoted field ("")'
        ) from None


def read_parquet(path: Path, options: ReadOptions) -> Iterator[Record]:
    """Parquet, streamed in record batches; the text is in `text_column`."""
    parquet, column = open_parquet(path, options)
    row = 0
    for batch in parquet.iter_batches(columns=[column], batch_size=65536):
        for value in batch.column(0).to_pylist():
            row += 1
            yield RawLine(value, str(path), row) if isinstance(value, str) else not_text(path, row, column, value)


def not_text(path: Path, row: int, column: str, value: object) -> Malformed:
    return Malformed(str(path), row, f"'{column}' is {type(value).__name__}, not text")


def open_parquet(path: Path, options: ReadOptions) -> tuple[pq.ParquetFile, str]:
    """The Parquet file and its text column, checked."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    column = _text_column(options, "parquet")
    require_file(path)
    compression = compression_of(path)
    if compression is not None:  # Parquet compresses inside the file: a compressed copy is no Parquet file
        raise CorpusError(
            f"{path} is {compression}-compressed: decompress it and point corpus.files at the Parquet file"
        )
    try:
        # Pre-buffering keeps every row group's raw bytes until the file is closed: at 10M
        # sentences, 0.4 GiB. A local file streams as well without it.
        parquet = pq.ParquetFile(path, pre_buffer=False, buffer_size=1 << 20)
    except (pa.ArrowInvalid, OSError) as exc:
        raise CorpusError(
            f"{path} is not a readable Parquet file ({exc}): set corpus.format to the file's real format "
            "(text, csv, nli-jsonl, ...) or convert it to Parquet"
        ) from None
    if column not in parquet.schema_arrow.names:
        raise _missing_column(path, column, parquet.schema_arrow.names)
    return parquet, column


def read_hf_dataset(source: Path, options: ReadOptions) -> Iterator[Record]:
    """A Hugging Face dataset: a hub id (streamed, needs the hub) or a directory written by
    `Dataset.save_to_disk` (offline)."""
    try:
        import datasets
    except ImportError:
        raise CorpusError("format hf needs the datasets package: pip install datasets") from None
    column = _text_column(options, "hf")
    name = str(source)
    try:
        if Path(name).is_dir():
            data = datasets.load_from_disk(name)
            if isinstance(data, datasets.DatasetDict):
                data = data[options.split]
        else:
            data = datasets.load_dataset(name, options.config, split=options.split, streaming=True)
    except (FileNotFoundError, ValueError, KeyError, ConnectionError) as exc:
        raise CorpusError(f"cannot load Hugging Face dataset '{name}' (split {options.split}): {exc}") from None
    names = list(data.column_names or [])
    if names and column not in names:
        raise _missing_column(name, column, names)
    for row, record in enumerate(data, start=1):
        value = record.get(column)
        if isinstance(value, str):
            yield RawLine(value, name, row)
        else:
            yield Malformed(name, row, f"'{column}' is {type(value).__name__}, not text")


def senteval_split(file: str) -> str | None:
    """SentEval's split is the file's suffix (s1.dev)."""
    return Path(file).suffix.lstrip(".") or None


def senteval_link_files(files: list[Path]) -> list[Path]:
    """The hypotheses (s2.*) beside each premise file (s1.*) not listed itself."""
    listed = {Path(f).resolve() for f in files}
    partners = [Path(f).with_name("s2" + Path(f).suffix) for f in files if Path(f).stem == "s1"]
    return [p for p in partners if p.resolve() not in listed and p.is_file()]


SENTEVAL = Reader(read_senteval_nli, yields_nli_pairs=True, split_of=senteval_split, link_files=senteval_link_files)
NLI_JSONL = Reader(read_nli_jsonl, yields_nli_pairs=True)
CSV = Reader(read_csv, needs_text_column=True)
HF = Reader(read_hf_dataset, reads_files=False, needs_text_column=True)


def _reader(value: object) -> Reader:
    if isinstance(value, Reader):
        return value
    if not callable(value):
        raise RegistryError(
            f"a corpus reader must be a viewmill.augment.ingest.readers.Reader or a function (path, ReadOptions) -> "
            f"records, not {value!r}"
        )
    return Reader(value, reads_files=False)  # a plain function: its sources go to it unchecked, as always


# Corpus formats; plugins add theirs in the entry-point group `viewmill.readers`.
READERS: Registry[Reader] = Registry(
    "viewmill.readers",
    "corpus format",
    {
        "text": "viewmill.augment.ingest.arrow_formats:TEXT",
        "book": "viewmill.augment.ingest.book:BOOK",
        "senteval": "viewmill.augment.ingest.readers:SENTEVAL",
        "nli-jsonl": "viewmill.augment.ingest.readers:NLI_JSONL",
        "csv": "viewmill.augment.ingest.readers:CSV",
        "parquet": "viewmill.augment.ingest.arrow_formats:PARQUET",
        "hf": "viewmill.augment.ingest.readers:HF",
    },
    check=_reader,
)


def nli_formats() -> list[str]:
    """The registered formats whose records carry NLI pairs, for messages."""
    return [name for name in READERS.names() if READERS.get(name).yields_nli_pairs]
