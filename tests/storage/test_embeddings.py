"""The lake's embedding store: reads what it holds, embeds and commits only new texts in fixed
chunks, keeps encoders apart, and refuses vectors it cannot trust."""

import numpy as np
import pyarrow as pa
import pytest
from viewmill.storage.embeddings import (
    EmbeddingStore,
    PendingEmbeddings,
    drop_encoder,
    embedding_key,
    embedding_rows,
    encoder_key,
    stored_encoders,
)
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
    texts = ["a dog runs", "a cat sleeps", "birds sing"]
    first = EmbeddingStore(lake, "enc+fp32", encoder)(texts)
    assert encoder.calls == [texts]
    again = EmbeddingStore(lake, "enc+fp32", encoder)
    second = again(texts[::-1])
    assert len(encoder.calls) == 1 and (again.hits, again.misses) == (3, 0)
    np.testing.assert_array_equal(first[::-1], second)  # each row is its text's, in the caller's order
    assert first.dtype == np.float32 and first.shape == (3, WIDTH)
    assert lake.scalar("SELECT count(*) FROM embeddings") == 3


def test_a_text_given_twice_is_refused(lake):
    with pytest.raises(ValueError, match="distinct texts"):
        EmbeddingStore(lake, "enc+fp32", Encoder())(["a", "b", "a"])


def test_pending_embeddings_are_stored_in_one_commit_without_duplicates(lake):
    texts = [f"t{i}" for i in range(5)]
    vectors = Encoder()(texts)
    pending = PendingEmbeddings("enc+fp32")
    pending.add(texts[:3], vectors[:3])
    pending.add(texts[2:], vectors[2:] + 1)  # t2 again, another vector: its first stays
    assert len(pending) == 5 and lake.scalar("SELECT count(*) FROM embeddings") == 0  # nothing written yet
    assert pending.write(lake) == 5 and len(pending) == 0
    assert lake.scalar("SELECT count(DISTINCT created_at) FROM embeddings") == 1  # one commit
    expected = np.concatenate([vectors[:3], vectors[3:] + 1])
    np.testing.assert_allclose(EmbeddingStore(lake, "enc+fp32", _refuse_to_embed)(texts), expected, rtol=1e-6)
    pending.add([*texts[:2], "t9"], Encoder()([*texts[:2], "t9"]))  # stored already, and one new
    assert pending.write(lake) == 1 and pending.write(lake) == 0
    assert lake.scalar("SELECT count(*) FROM embeddings") == 6
    with pytest.raises(ValueError, match="one vector per text"):
        pending.add(["a", "b"], vectors[:1])


def _refuse_to_embed(texts: list[str]) -> np.ndarray:
    raise AssertionError(f"embedded {texts}: the store holds them")


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
    assert "enc+fp32" in str(refused.value) and "viewmill lake embeddings --drop enc+fp32" in str(refused.value)


def test_a_null_vector_read_first_is_refused_too(lake):
    _plant(lake, None)
    with pytest.raises(LakeError, match="null"):
        EmbeddingStore(lake, "enc+fp32", Encoder())(["planted"])


def test_encoders_are_listed_and_one_is_dropped_in_one_commit(lake):
    EmbeddingStore(lake, "a+fp32", Encoder())(["x", "y"])
    EmbeddingStore(lake, "b+bf16", Encoder())(["x"])
    listed = stored_encoders(lake).to_pylist()
    assert [(r["encoder"], r["texts"], r["dims"], r["vector_bytes"]) for r in listed] == [
        ("a+fp32", 2, WIDTH, 2 * WIDTH * 4),
        ("b+bf16", 1, WIDTH, WIDTH * 4),
    ]
    assert drop_encoder(lake, "a+fp32") == 2
    assert stored_encoders(lake)["encoder"].to_pylist() == ["b+bf16"]
    with pytest.raises(LakeError, match="no embeddings under encoder 'a\\+fp32'.*b\\+bf16"):
        drop_encoder(lake, "a+fp32")


def test_stored_embeddings_are_hashed_and_verified_with_the_lake(lake):
    EmbeddingStore(lake, "enc+fp32", Encoder())([f"text {i}" for i in range(50)])
    report = verify_lake(lake)
    assert report.ok, report


def test_a_text_stored_twice_reads_as_its_first_write(lake):
    EmbeddingStore(lake, "enc+fp32", lambda texts: np.ones((len(texts), WIDTH)))(["x"])
    # A second miner that found "x" missing too, committing without a duplicate check.
    racing = embedding_rows("enc+fp32", pa.array([embedding_key("x")]), np.full((1, WIDTH), 2.0, np.float32))
    with lake.transaction():
        lake.append("embeddings", racing)
    assert lake.scalar("SELECT count(*) FROM embeddings") == 2
    for _ in range(3):
        np.testing.assert_array_equal(EmbeddingStore(lake, "enc+fp32", _refuse_to_embed)(["x"]), np.ones((1, WIDTH)))


def test_a_dropped_encoder_s_files_go_at_compaction_and_the_others_stay(lake):
    from viewmill.storage.maintenance import compact_lake

    EmbeddingStore(lake, "a+fp32", Encoder())(["x", "y"])
    EmbeddingStore(lake, "b+fp32", Encoder())(["x"])
    folder = lake.root / "data" / "main" / "embeddings"
    assert {p.parent.name for p in folder.rglob("*.parquet")} == {"encoder=a%2Bfp32", "encoder=b%2Bfp32"}  # URL-encoded
    drop_encoder(lake, "a+fp32")
    compact_lake(lake, keep_days=0)
    assert {p.parent.name for p in folder.rglob("*.parquet")} == {"encoder=b%2Bfp32"}
    assert verify_lake(lake).ok
