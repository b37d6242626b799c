import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from viewmill.augment.ingest.corpus import ingest
from viewmill.augment.ingest.readers import CorpusError, ReadOptions


def _ingest(files, fmt, **overrides):
    options = dict(corpus="c", fmt=fmt, lang="en", detokenize=False, min_words=2, max_words=40, limit=None, run_id="r")
    options.update(overrides)
    return ingest(files, **options)


def _snli(tmp_path, name="snli_1.0_dev.jsonl"):
    records = [
        {"sentence1": "A man plays a guitar.", "sentence2": "A person makes music.", "gold_label": "entailment",
         "pairID": "p1"},
        {"sentence1": "A man plays a guitar.", "sentence2": "Nobody plays.", "gold_label": "-", "pairID": "p2"},
    ]  # fmt: skip
    lines = [json.dumps(r) for r in records] + ['{"sentence1": "broken', json.dumps({"sentence1": "only one side"})]
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_nli_jsonl_stops_on_a_malformed_record_by_default(tmp_path):
    path = _snli(tmp_path)
    with pytest.raises(CorpusError, match=r"snli_1.0_dev.jsonl:3: not a JSON object.*on_error: skip"):
        _ingest([path], "nli-jsonl")


def test_nli_jsonl_skips_and_counts_malformed_records_and_keeps_labelled_pairs(tmp_path):
    result = _ingest([_snli(tmp_path)], "nli-jsonl", on_error="skip", nli_links=True)
    assert result.sentences["text"].to_pylist() == ["A man plays a guitar.", "A person makes music.", "Nobody plays."]
    assert result.stats.malformed == 2
    assert result.stats.malformed_examples[1].endswith(":4: a record needs string fields sentence1 and sentence2")
    assert result.sentences["split"].to_pylist() == ["dev"] * 3
    origin = result.sentences["origin"][1].as_py()
    assert (origin["pair_id"], origin["nli_label"], origin["row"]) == ("p1", "entailment", 1)
    links = result.nli_pairs.to_pylist()
    assert [(r["pair_id"], r["label"]) for r in links] == [("p1", "entailment")], "'-' has no gold label"


def test_multinli_split_names(tmp_path):
    result = _ingest([_snli(tmp_path, "multinli_1.0_dev_mismatched.jsonl")], "nli-jsonl", on_error="skip")
    assert set(result.sentences["split"].to_pylist()) == {"dev_mismatched"}


def test_book_text_is_split_into_sentences_across_wrapped_lines(tmp_path):
    path = tmp_path / "book.txt"
    path.write_text(
        "CHAPTER ONE\n\nMr. Smith went to\nWashington on Monday. He arrived at 5 p.m. and\nslept.\n\n"
        '"Is it late?" she asked. It was.\n',
        encoding="utf-8",
    )
    result = _ingest([path], "book", min_words=2)
    texts = result.sentences["text"].to_pylist()
    assert texts == [
        "CHAPTER ONE",
        "Mr. Smith went to Washington on Monday.",
        "He arrived at 5 p.m. and slept.",
        '"Is it late?" she asked.',
        "It was.",
    ]
    rows = [o["row"] for o in result.sentences["origin"].to_pylist()]
    assert rows == [1, 3, 3, 7, 7], "a sentence's origin is the line its paragraph starts on"
    with pytest.raises(CorpusError, match="no sentence splitter for language 'xx'"):
        _ingest([path], "book", lang="xx")


def test_csv_text_column_bad_rows_and_missing_column(tmp_path):
    path = tmp_path / "data.csv"
    path.write_text('id,text\n1,"A quoted, comma sentence."\n2,Plain words here\n3,too,many,fields\n', encoding="utf-8")
    options = ReadOptions(text_column="text")
    result = _ingest([path], "csv", options=options, on_error="skip")
    assert result.sentences["text"].to_pylist() == ["A quoted, comma sentence.", "Plain words here"]
    assert result.stats.malformed == 1 and ":4:" in result.stats.malformed_examples[0]
    with pytest.raises(CorpusError, match=r"no column 'sentence' \(columns: id, text\).*text_column"):
        _ingest([path], "csv", options=ReadOptions(text_column="sentence"))


def test_parquet_is_streamed_by_column(tmp_path):
    path = tmp_path / "data.parquet"
    texts = [f"sentence number {i}" for i in range(100_000)] + [None]
    pq.write_table(pa.table({"id": range(len(texts)), "body": texts}), path, row_group_size=10_000)
    result = _ingest([path], "parquet", options=ReadOptions(text_column="body"), on_error="skip", limit=5)
    assert result.sentences["text"].to_pylist() == [f"sentence number {i}" for i in range(5)]
    full = _ingest([path], "parquet", options=ReadOptions(text_column="body"), on_error="skip")
    assert full.sentences.num_rows == 100_000 and full.stats.malformed == 1


def test_hugging_face_dataset_saved_to_disk(tmp_path):
    datasets = pytest.importorskip("datasets")
    splits = datasets.DatasetDict(
        train=datasets.Dataset.from_dict({"sentence": ["A first training sentence.", "Another training sentence."]}),
        test=datasets.Dataset.from_dict({"sentence": ["A held out sentence."]}),
    )
    splits.save_to_disk(str(tmp_path / "ds"))
    result = _ingest([tmp_path / "ds"], "hf", options=ReadOptions(text_column="sentence", split="test"))
    assert result.sentences["text"].to_pylist() == ["A held out sentence."]
    with pytest.raises(CorpusError, match="no column 'text'"):
        _ingest([tmp_path / "ds"], "hf", options=ReadOptions(text_column="text"))


def test_text_with_a_bad_byte_is_skipped_and_counted(tmp_path):
    path = tmp_path / "latin.txt"
    path.write_bytes(b"first good line\ncaf\xe9 au lait\nthird good line\n")
    result = _ingest([path], "text", on_error="skip")
    assert result.sentences["text"].to_pylist() == ["first good line", "third good line"]
    hint = "re-encode the file as UTF-8, e.g. iconv -f latin1 -t utf-8"
    assert result.stats.malformed_examples == [f"{path}:2: not valid UTF-8 (byte 0xe9 at column 4); {hint}"]


# -- issue 21, item 10: sources that are not files, UTF-16 ------------------------------------
def test_devices_pipes_and_folders_are_named_as_what_they_are(tmp_path):
    import os

    folder, fifo = tmp_path / "corpus", tmp_path / "corpus.fifo"
    folder.mkdir()
    os.mkfifo(fifo)
    expected = {
        folder: f"corpus file {folder} is a folder, not a file: list the files inside it in corpus.files",
        fifo: f"corpus file {fifo} is a named pipe (FIFO), not a file: a run reads its corpus more than once "
        "(the checks, then ingest), so write the pipe's content to a regular file and point corpus.files at it",
        Path("/dev/zero"): "corpus file /dev/zero is a character device (like /dev/zero or a terminal), not a file: "
        "reading it never ends or waits for input; point corpus.files at a regular file",
    }
    for path, message in expected.items():
        for fmt in ("text", "book", "csv", "parquet"):
            with pytest.raises(CorpusError) as err:
                _ingest([path], fmt, options=ReadOptions(text_column="text"))
            assert str(err.value) == message, fmt
    with pytest.raises(CorpusError, match=r"corpus file not found: .*nope.txt"):
        _ingest([tmp_path / "nope.txt"], "text")


def test_every_source_is_checked_before_any_is_read(tmp_path):
    first = tmp_path / "first.txt"
    first.write_bytes("A man plays a guitar.\n".encode("utf-16"))  # reading it would fail on its encoding
    with pytest.raises(CorpusError, match="^corpus file /dev/zero is a character device"):
        _ingest([first, Path("/dev/zero")], "text")


def test_utf16_is_recognised_by_its_mark_or_its_nul_bytes():
    from viewmill.augment.ingest.source_files import utf16_encoding

    text = "A man plays a guitar.\nTwo dogs run.\n"
    assert utf16_encoding(text.encode("utf-16-le")) == ("UTF-16LE", "every other byte is NUL")
    assert utf16_encoding(text.encode("utf-16-be")) == ("UTF-16BE", "every other byte is NUL")
    assert utf16_encoding(b"\xff\xfe" + text.encode("utf-16-le")) == (
        "UTF-16LE", "it starts with the UTF-16 byte-order mark FF FE",
    )  # fmt: skip
    assert utf16_encoding(b"\xfe\xff" + "Привет".encode("utf-16-be"))[0] == "UTF-16BE"
    mark = "it starts with the UTF-32 byte-order mark FF FE 00 00"
    assert utf16_encoding(text.encode("utf-32")) == ("UTF-32LE", mark)
    assert utf16_encoding(text.encode("utf-8")) is None
    assert utf16_encoding(b"a NUL\x00 byte in one line of UTF-8 text\n") is None, "a bad line, not UTF-16"
    assert utf16_encoding("Привет мир".encode()) is None


def test_a_utf16_file_is_refused_with_the_conversion_that_fixes_it(tmp_path):
    import shutil
    import subprocess

    path = tmp_path / "corpus.txt"
    path.write_bytes("A man plays a guitar.\nTwo dogs run in a field.\n".encode("utf-16"))  # with its mark
    converted = tmp_path / "corpus.utf8.txt"
    for fmt in ("text", "csv"):
        with pytest.raises(CorpusError) as err:
            _ingest([path], fmt, options=ReadOptions(text_column="text"))
        assert str(err.value) == (
            f"{path} is UTF-16LE text (it starts with the UTF-16 byte-order mark FF FE), not UTF-8: convert it with "
            f"iconv -f UTF-16 -t UTF-8 {path} > {converted} and point corpus.files at {converted}"
        )
    if shutil.which("iconv") is None:
        pytest.skip("no iconv here to run the hint")
    subprocess.run(f"iconv -f UTF-16 -t UTF-8 {path} > {converted}", shell=True, check=True)
    texts = _ingest([converted], "text").sentences["text"].to_pylist()
    assert texts == ["A man plays a guitar.", "Two dogs run in a field."], "the hint's command fixes the file"
