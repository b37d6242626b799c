"""A plugin corpus format takes ingest's fast path as viewmill's text and Parquet formats do:
its `Reader.batches` gives Arrow arrays of lines, and ingest reads them (never the record by
record `read`), whatever the format is called."""

import pytest
from viewmill.augment.ingest.corpus import ingest
from viewmill.augment.ingest.readers import READERS

from tests.plugins import forget_plugin, install_plugin

PLUGIN = '''
import numpy as np
import pyarrow as pa
from viewmill.augment.ingest.line_batches import LineBatch
from viewmill.augment.ingest.readers import Reader
from viewmill.augment.ingest.source_files import Malformed


def read_one_by_one(path, options):
    raise AssertionError("ingest read record by record: the fast path was not taken")


def pipe_batches(path, options):
    """A line batch per '|'-separated field list; a field 'BAD' comes between them as malformed."""
    row = 0
    for line in path.read_text(encoding="utf-8").splitlines():
        fields = line.split("|")
        if fields == ["BAD"]:
            row += 1
            yield Malformed(str(path), row, "BAD")
            continue
        yield LineBatch(str(path), pa.array(fields, pa.string()), np.arange(row + 1, row + len(fields) + 1))
        row += len(fields)


PIPE_BATCHES = Reader(read_one_by_one, batches=pipe_batches)
'''


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    install_plugin(tmp_path / "site", monkeypatch, "viewmill_batch_plugin", PLUGIN,
                   "[viewmill.readers]\npipe-batches = viewmill_batch_plugin:PIPE_BATCHES\n")  # fmt: skip
    yield tmp_path
    forget_plugin("viewmill_batch_plugin")


def test_a_plugin_format_with_batches_is_ingested_through_them(plugin):
    source = plugin / "corpus.pipes"
    source.write_text("the cat sat down|a dog ran off\nBAD\nthe cat sat down|birds sing at dawn\n", encoding="utf-8")
    assert READERS["pipe-batches"].batches is not None
    result = ingest([source], corpus="c", fmt="pipe-batches", lang="en", detokenize=False, run_id="r",
                    on_error="skip", min_words=3, max_words=64, limit=None)  # fmt: skip
    rows = result.sentences.to_pylist()
    assert [(row["text"], row["origin"]["row"]) for row in rows] == [
        ("the cat sat down", 1), ("a dog ran off", 2), ("birds sing at dawn", 5)
    ]  # fmt: skip
    assert (result.stats.duplicates, result.stats.malformed) == (1, 1)


def test_viewmill_formats_declare_their_fast_path_and_the_others_none():
    assert [name for name in READERS.builtin_names() if READERS[name].batches is not None] == ["text", "parquet"]
