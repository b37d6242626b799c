"""Corpus versions from millions of ids: the streamed hash is `fingerprint(corpus, sorted ids)`
whatever form the ids come in and however they fall into chunks, and the members are the ids."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from viewmill.storage import corpus_versions
from viewmill.storage.corpus_versions import _SortedIds, corpus_version, record_corpus_version
from viewmill.storage.hex_ids import hex_ids, ids_of
from viewmill.storage.ids import fingerprint
from viewmill.storage.lake import Lake


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(corpus_versions, "CHUNK", 7)


@given(st.lists(st.integers(0, 2**64 - 1), max_size=60), st.text(max_size=5))
@settings(max_examples=60, deadline=None)
def test_hashes_give_the_version_of_their_hex_ids(values, corpus):
    hashes = np.array(values, np.uint64)
    texts = sorted(set(hex_ids(hashes).to_pylist()))
    for chunk in (7, 1 << 18):
        corpus_versions.CHUNK = chunk
        assert corpus_version(corpus, _SortedIds(hashes)) == fingerprint(corpus, texts)
    corpus_versions.CHUNK = 1 << 18


@given(st.lists(st.text(max_size=6), max_size=40))
@settings(max_examples=60, deadline=None)
def test_text_ids_any_characters_give_the_fingerprint(ids):
    """Quotes, backslashes and control characters are escaped as `canonical_json` escapes them."""
    assert corpus_version("c", _SortedIds(ids)) == fingerprint("c", sorted(set(ids)))


def test_a_version_is_recorded_once_with_all_its_members(tmp_path, small_chunks):
    hashes = np.array([5, 3, 2**64 - 1, 3, 0, *range(100, 130)], np.uint64)
    with Lake(tmp_path / "lake") as lake:
        version = record_corpus_version(lake, "c", hashes, run_id="r1")
        again = record_corpus_version(lake, "c", hashes[::-1], run_id="r2")
        members = lake.arrow("SELECT sentence_id FROM corpus_members WHERE corpus_version = ?", [version])
        row = lake.arrow("SELECT n_sentences, run_id FROM corpus_versions").to_pylist()
    assert again == version == fingerprint("c", sorted(set(hex_ids(hashes).to_pylist())))
    assert sorted(members["sentence_id"].to_pylist()) == sorted(set(hex_ids(hashes).to_pylist()))
    assert row == [{"n_sentences": 34, "run_id": "r1"}], "the same ids again add nothing"


def test_hex_ids_round_trip_and_refuse_what_is_not_an_id():
    hashes = np.array([0, 1, 2**64 - 1, 0xDEADBEEF12345678], np.uint64)
    texts = hex_ids(hashes)
    assert texts.to_pylist()[3] == "deadbeef12345678"
    assert ids_of(texts).tolist() == hashes.tolist()
    assert ids_of(texts.slice(1, 2)).tolist() == hashes[1:3].tolist()
    import pyarrow as pa

    for bad in (["s0"], ["DEADBEEF12345678"], ["deadbeef1234567g"], [None]):
        with pytest.raises(ValueError, match="16"):
            ids_of(pa.array(bad, pa.string()))
