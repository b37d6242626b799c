"""The meaning filter's embedding cache: rows as the encoder returns them, each distinct text
embedded once, the LRU bound, and verdicts byte-identical to judging without it."""

import numpy as np
import pytest
from viewmill.augment.embedding_cache import EmbeddingCache
from viewmill.augment.meaning import Candidate, MeaningSpec, judge

from tests.augment.test_meaning import A_VIEWS, B_VIEWS, S1, S2, S3, S4, VECTORS, FakeEncoder, _lake, _run_three, _spec


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
