"""time_training: what `viewmill plan` measures of training. Its peak covers a batch of
`max_length` tokens, the step a long run meets sooner or later, not only the sample's steps."""

import pyarrow as pa
import viewmill.train.loop as loop
from viewmill.train.config import TrainConfig
from viewmill.train.step_timing import longest_batch, time_training

from tests.conftest import SENTENCES


def _pairs() -> pa.Table:
    short = [" ".join(text.split()[:3]) for text in SENTENCES]  # every sample text is 3 words
    return pa.table({"text_a": short, "text_b": [text.lower() for text in short],
                     "sentence_id": [f"s{i}" for i in range(len(short))]})  # fmt: skip


def test_the_longest_batch_fills_max_length_with_the_samples_longest_text():
    batch = longest_batch(_pairs(), batch_size=4, max_length=10)
    assert batch.num_rows == 4 and batch["sentence_id"].to_pylist() == ["s0", "s1", "s2", "s3"]
    for name in ("text_a", "text_b"):
        assert {len(text.split()) for text in batch[name].to_pylist()} == {10}


def test_training_is_timed_on_the_sample_and_its_peak_covers_a_max_length_batch(tmp_path, tiny_model, monkeypatch):
    shapes: list[tuple[int, int]] = []
    original = loop.train_step

    def recording(model, optimizer, batch, n, **kwargs):
        shapes.append(tuple(batch["input_ids"].shape))
        return original(model, optimizer, batch, n, **kwargs)

    monkeypatch.setattr(loop, "train_step", recording)
    config = TrainConfig(objective="infonce", steps=50, batch_size=4, max_length=24, seed=1)
    found = time_training(config, str(tiny_model), _pairs(), "cpu", tmp_path / "out", card={}, timed_steps=2)
    timed, probe = shapes[:-1], shapes[-1]
    assert len(timed) == 3 and max(length for _, length in timed) < 12  # the sample's own short batches
    assert probe == (8, 24), "one untimed step of batch_size pairs at max_length tokens"
    assert found.step_s > 0 and found.peak_rss > 0
    assert (tmp_path / "out").is_dir()
