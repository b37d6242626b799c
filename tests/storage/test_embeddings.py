"""The lake's embedding store: reads what it holds, embeds and commits only new texts in fixed
chunks, keeps encoders apart, and refuses vectors it cannot trust."""

import numpy as np
import pyarrow as pa
import pytest
from viewmill.storage.embeddings import EmbeddingStore, embedding_key, encoder_key
from viewmill.storage.integrity import verify_lake
from viewmill.storage.lake import Lake, LakeError
from viewmill.storage.schema import EMBEDDINGS

WIDTH = 5


class Encoder:
    """Deterministic vectors from the text, every call recorded."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return np.stack([np.random.default_rng(len(t) * 1009 + sum(map(ord, t))).normal(size=WIDTH) for t in texts])


@pytest.fixture
def lake(tmp_path):
    with Lake(tmp_path / "lake") as opened:
        yield opened


def test_a_second_call_reads_every_text_and_embeds_nothing(lake):
    encoder = Encoder()
    texts = ["a dog runs", "a cat sleeps", "a dog runs", "birds sing"]
    first = EmbeddingStore(lake, "enc+fp32", encoder)(texts)
    assert encoder.calls == [["a dog runs", "a cat sleeps", "birds sing"]]  # each distinct text once
    again = EmbeddingStore(lake, "enc+fp32", encoder)
    second = again(texts)
    assert len(encoder.calls) == 1 and (again.hits, again.misses) == (3, 0)
    np.testing.assert_array_equal(first, second)
    np.testing.assert_array_equal(first[0], first[2])
    assert first.dtype == np.float32 and first.shape == (4, WIDTH)
    assert lake.scalar("SELECT count(*) FROM embeddings") == 3


def test_only_new_texts_are_embedded_in_fixed_chunks_in_the_caller_s_order(lake):
    encoder = Encoder()
    EmbeddingStore(lake, "enc+fp32", encoder)(["t1", "t3"])
    encoder.calls.clear()
    store = EmbeddingStore(lake, "enc+fp32", encoder, chunk=2)
    out = store(["t0", "t1", "t2", "t3", "t4", "t5", "t6"])
    assert encoder.calls == [["t0", "t2"], ["t4", "t5"], ["t6"]]
    assert (store.hits, store.misses) == (2, 5)
    np.testing.assert_allclose(out, Encoder()(["t0", "t1", "t2", "t3", "t4", "t5", "t6"]), rtol=1e-6)


def test_a_failed_chunk_keeps_the_chunks_committed_before_it(lake):
    calls = []

    def failing(texts: list[str]) -> np.ndarray:
        calls.append(texts)
        if len(calls) == 2:
            raise RuntimeError("killed")
        return Encoder()(texts)

    with pytest.raises(RuntimeError, match="killed"):
        EmbeddingStore(lake, "enc+fp32", failing, chunk=2)(["a", "b", "c", "d"])
    assert lake.scalar("SELECT count(*) FROM embeddings") == 2
    encoder = Encoder()
    EmbeddingStore(lake, "enc+fp32", encoder, chunk=2)(["a", "b", "c", "d"])
    assert encoder.calls == [["c", "d"]]  # the rerun resumes


def test_encoders_and_precisions_never_answer_for_each_other(lake):
    encoder = Encoder()
    EmbeddingStore(lake, encoder_key("weights", "fp32"), encoder)(["x"])
    EmbeddingStore(lake, encoder_key("weights", "bf16"), encoder)(["x"])
    EmbeddingStore(lake, encoder_key("other", "fp32"), encoder)(["x"])
    assert len(encoder.calls) == 3
    assert encoder_key("weights", "fp32") != encoder_key("weights", "bf16")


def test_the_key_is_a_128_bit_hash_of_the_exact_text():
    assert len(embedding_key("a")) == 32
    assert embedding_key("Hello") != embedding_key("hello") != embedding_key("hello ")


def _plant(lake: Lake, vector: list[float] | None, text: str = "planted") -> None:
    row = {"encoder": "enc+fp32", "text_hash": embedding_key(text), "vector": vector, "created_at": None}
    lake.append("embeddings", pa.Table.from_pylist([row], schema=EMBEDDINGS))


@pytest.mark.parametrize(
    "vector", [[1.0, 2.0], [], [float("nan")] * WIDTH, None], ids=["other-width", "empty", "nan", "null"]
)
def test_a_vector_it_cannot_trust_is_refused_with_the_fix(lake, vector):
    EmbeddingStore(lake, "enc+fp32", Encoder())(["kept"])
    _plant(lake, vector)
    with pytest.raises(LakeError) as refused:
        EmbeddingStore(lake, "enc+fp32", Encoder())(["kept", "planted"])
    assert "enc+fp32" in str(refused.value) and "DELETE FROM embeddings" in str(refused.value)


def test_stored_embeddings_are_hashed_and_verified_with_the_lake(lake):
    EmbeddingStore(lake, "enc+fp32", Encoder())([f"text {i}" for i in range(50)])
    report = verify_lake(lake)
    assert report.ok, report
