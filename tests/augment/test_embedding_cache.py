"""The meaning filter's embedding cache: rows as the encoder returns them, each distinct text
embedded once, the LRU bound, and verdicts byte-identical to judging without it."""

import logging

import numpy as np
import pytest
from viewmill.augment.data_augmenters import Identity
from viewmill.augment.embedding_cache import EmbeddingCache
from viewmill.augment.meaning import Candidate, MeaningJudge, MeaningSpec, judge
from viewmill.storage.embeddings import EmbeddingStore, PendingEmbeddings, embedding_key

from tests.augment.test_meaning import (
    A_VIEWS,
    B_VIEWS,
    S1,
    S2,
    S3,
    S4,
    VECTORS,
    FakeEncoder,
    Table,
    _lake,
    _run_three,
    _spec,
)
from tests.views import make_views


def test_rows_are_the_encoders_and_each_distinct_text_is_embedded_once():
    encoder = FakeEncoder()
    cache = EmbeddingCache(encoder)
    first = cache([S1, A_VIEWS[S1], S1])
    assert first.tolist() == encoder([S1, A_VIEWS[S1], S1]).tolist()
    again = cache([A_VIEWS[S1], S2, S1])
    assert again.tolist() == np.array([VECTORS[t] for t in (A_VIEWS[S1], S2, S1)], np.float32).tolist()
    assert encoder.calls[:1] + encoder.calls[2:] == [[S1, A_VIEWS[S1]], [S2]]  # calls[1]: the comparison above
    assert len(cache([])) == 0


def test_the_least_recently_used_rows_go_past_the_bound():
    encoder = FakeEncoder()
    cache = EmbeddingCache(encoder, max_texts=2)
    cache([S1, S2])
    cache([S1])  # S1 used last: S2 goes first
    cache([S3])
    assert len(cache) == 2
    cache([S1, S2])
    assert encoder.calls == [[S1, S2], [S3], [S2]]
    # More missing texts than the bound: every row still comes back.
    assert cache([S1, S2, S3, S4]).shape == (4, 3) and len(cache) == 2
    with pytest.raises(ValueError, match="give 0 or more"):
        EmbeddingCache(encoder, max_texts=-1)


def test_a_bad_encoder_output_is_named():
    with pytest.raises(ValueError, match="returned shape"):
        EmbeddingCache(lambda texts: np.zeros((1, 3)))([S1, S2])


def test_verdicts_and_cosines_are_byte_identical_with_the_cache(tmp_path):
    """Three augmenters judged in recipe order, with the encoder as is and behind a cache shared
    by all three: every views row (cosines to the last bit, reasons) is the same."""
    tables = []
    for name, embed in (("plain", FakeEncoder()), ("cached", EmbeddingCache(FakeEncoder()))):
        (tmp_path / name).mkdir()
        with _lake(tmp_path / name) as lake:
            _run_three(lake, _spec(), embed)
            tables.append(lake.arrow("SELECT * FROM views ORDER BY view_id").to_pylist())
    assert tables[0] == tables[1] and {row["reject_reason"] for row in tables[0]} > {None}
    candidates = [Candidate(s, B_VIEWS[s], "table") for s in (S1, S2, S3, S4)]
    cached = EmbeddingCache(FakeEncoder())
    assert judge(candidates, MeaningSpec(), FakeEncoder()) == judge(candidates, MeaningSpec(), cached)


SPECS = (Identity(name="same"), Table(name="a", views=A_VIEWS), Table(name="b", views=B_VIEWS))


def _filter_views(lake, embed, specs=SPECS, earlier=()) -> list[str]:
    """`specs` in recipe order, each judged by a storing filter through `embed`, two chunks each."""
    earlier = list(earlier)
    for spec in specs:
        judge_ = MeaningJudge("fake-1", embed, tuple(earlier), embedding_key="fake+fp32", store=True)
        earlier.append(make_views(lake, "c", spec, _spec(), run_id="r", chunk_size=3, judge=judge_).config_hash)
    return earlier


def test_a_storing_filter_writes_each_text_it_embedded_once_a_commit_per_shard(tmp_path):
    """Three augmenters share one cache, two chunks each: the store gets every text the encoder
    embedded, once (each source is asked for by every augmenter), in one commit per
    augmenter's shard (not one per chunk), with the encoder's vectors."""
    encoder = FakeEncoder()
    with _lake(tmp_path) as lake:
        _filter_views(lake, EmbeddingCache(encoder))
        embedded = [text for call in encoder.calls for text in call]
        stored = lake.arrow("SELECT text_hash, created_at FROM embeddings")
        assert sorted(stored["text_hash"].to_pylist()) == sorted(embedding_key(t) for t in embedded)
        assert len(set(stored["created_at"].to_pylist())) == 3
        vectors = EmbeddingStore(lake, "fake+fp32", _refuse_to_embed)(embedded)
    np.testing.assert_array_equal(vectors, np.array([VECTORS[t] for t in embedded], np.float32))


def test_a_shard_writes_its_pending_embeddings_whenever_they_fill(tmp_path, monkeypatch):
    monkeypatch.setattr(PendingEmbeddings, "limit", 2)  # a chunk's texts fill it: a write after each chunk
    encoder = FakeEncoder()
    with _lake(tmp_path) as lake:
        _filter_views(lake, EmbeddingCache(encoder), SPECS[:1])
        commits = lake.scalar("SELECT count(DISTINCT created_at) FROM embeddings")
        stored = lake.scalar("SELECT count(*) FROM embeddings")
    assert commits == 2 and stored == len({text for call in encoder.calls for text in call})


def _refuse_to_embed(texts: list[str]) -> np.ndarray:
    raise AssertionError(f"embedded {texts}: the store holds them")


class FailingOnB(FakeEncoder):
    """Fails the second time it is asked for augmenter b's views (while `failing`)."""

    failing = True

    def __call__(self, texts: list[str]) -> np.ndarray:
        asks_b = lambda call: any(t in B_VIEWS.values() for t in call)  # noqa: E731
        if self.failing and asks_b(texts) and any(asks_b(call) for call in self.calls):
            raise RuntimeError("encoder failed")
        return super().__call__(texts)


def _every_text(lake) -> list[str]:
    return lake.arrow("SELECT text FROM sentences UNION SELECT text FROM views")["text"].to_pylist()


def test_a_failing_shard_stores_what_it_embedded_and_its_retry_in_the_process_misses_nothing(tmp_path):
    """The process's cache holds what the failed attempt embedded, so its retry embeds none of
    it again: had the attempt not stored it, mining would have to."""
    encoder = FailingOnB()
    cache = EmbeddingCache(encoder)
    with _lake(tmp_path) as lake:
        earlier = _filter_views(lake, cache, SPECS[:2])
        with pytest.raises(RuntimeError, match="encoder failed"):
            _filter_views(lake, cache, SPECS[2:], earlier)
        assert lake.scalar("SELECT count(*) FROM views WHERE augmenter = 'b'") == 3  # its first chunk
        encoder.failing = False
        _filter_views(lake, cache, SPECS[2:], earlier)  # a retry in the same process
        EmbeddingStore(lake, "fake+fp32", _refuse_to_embed)(_every_text(lake))


def _disk_full(self, lake) -> int:
    raise OSError("disk full")


def test_a_shard_whose_store_fails_too_loses_only_its_pending_embeddings_and_says_so(tmp_path, monkeypatch, caplog):
    """As a kill: the views committed stay, the vectors pending are lost, and mining embeds them."""
    with _lake(tmp_path) as lake:
        earlier = _filter_views(lake, EmbeddingCache(FailingOnB()), SPECS[:2])
        monkeypatch.setattr(PendingEmbeddings, "write", _disk_full)
        with pytest.raises(RuntimeError, match="encoder failed"), caplog.at_level(logging.WARNING):
            _filter_views(lake, EmbeddingCache(FailingOnB()), SPECS[2:], earlier)
        monkeypatch.undo()
        assert "pending embeddings were not stored (disk full); mining embeds them" in caplog.text
        stored = set(lake.arrow("SELECT text_hash FROM embeddings")["text_hash"].to_pylist())
        assert not {embedding_key(t) for t in B_VIEWS.values()} & stored
        _filter_views(lake, EmbeddingCache(FakeEncoder()))  # a new process: b's last chunk only
        assert lake.scalar("SELECT count(*) FROM views WHERE augmenter = 'b'") == 4
        miner = FakeEncoder()
        EmbeddingStore(lake, "fake+fp32", miner)(_every_text(lake))
    # Only b's first chunk's three views: its last chunk's were stored at the rerun's end.
    assert len(miner.calls) == 1 and len(miner.calls[0]) == 3 and set(miner.calls[0]) <= set(B_VIEWS.values())
