"""The augment stage's meaning filter embeds each distinct text once per process: a sentence's
source once for all augmenters, an earlier augmenter's view once for its own check and the
later near-duplicate checks (issue 32: three augmenters embedded 6 texts a sentence for 3)."""

import numpy as np
import pytest
from viewmill.augment.data_augmenters import Identity
from viewmill.augment.models import release_models
from viewmill.pipelines.stages import augment as stage

from tests.augment.test_meaning import A_VIEWS, B_VIEWS, S1, S2, S3, S4, VECTORS, Table, _lake, _spec
from tests.views import make_views


class CountingModel:
    """A sentence model's `encode` by table lookup, keeping every text it was given."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def encode(self, texts: list[str], **options) -> np.ndarray:
        self.texts += texts
        return np.array([VECTORS[t] for t in texts], dtype=np.float32)


@pytest.fixture
def model(monkeypatch):
    counting = CountingModel()
    monkeypatch.setattr(stage, "resolve_encoder", lambda name: f"/models/{name}")
    monkeypatch.setattr(stage, "encoder_fingerprint", lambda path: "fake-weights")
    monkeypatch.setattr(stage, "load_sentence_model", lambda path: counting)
    release_models()  # no encoder (or its cache) left from another test in this process
    yield counting
    release_models()


def test_each_distinct_text_is_embedded_once_across_augmenters_and_shards(tmp_path, model):
    filters = _spec()
    judge = stage.meaning_judge(filters.meaning)
    configs: list[str] = []
    with _lake(tmp_path) as lake:
        for spec in (Identity(name="same"), Table(name="a", views=A_VIEWS), Table(name="b", views=B_VIEWS)):
            report = make_views(lake, "c", spec, filters, run_id="r", chunk_size=2, shards=2,
                                judge=stage._after(judge, configs))  # fmt: skip
            configs.append(report.config_hash)
        rejected = lake.scalar("SELECT count(*) FROM views WHERE reject_reason LIKE 'near-duplicate:%'")
    sources = [S1, S2, S3, S4]
    distinct = {*sources, *A_VIEWS.values(), *B_VIEWS.values()}
    assert sorted(model.texts) == sorted(distinct)  # before: the sources three times, a's kept views twice
    assert rejected == 2  # b's near-duplicates of a's views were judged from the cached rows
