"""The augment stage's meaning filter embeds each distinct text once per process: a sentence's
source once for all augmenters, an earlier augmenter's view once for its own check and the
later near-duplicate checks (issue 32: three augmenters embedded 6 texts a sentence for 3);
its shard jobs come shard by shard, so the bounded cache still holds a shard's rows."""

import numpy as np
import pytest
from viewmill.augment.data_augmenters import Identity
from viewmill.augment.models import release_models
from viewmill.augment.views import Shard
from viewmill.pipelines.context import RunContext
from viewmill.pipelines.recipe import load_recipe
from viewmill.pipelines.stages import augment as stage
from viewmill.pipelines.state import StatePaths

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
    monkeypatch.setattr(stage, "load_sentence_model", lambda path, device="cpu": counting)
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


RECIPE = """
name: order
corpus: {files: [corpus.txt]}
augmenters:
  - {name: same, method: identity}
  - {name: again, method: identity}
pair: {view_a: same, view_b: again}
"""


@pytest.mark.parametrize("meaning", [False, True])
def test_with_the_meaning_filter_a_shards_augmenters_follow_each_other(tmp_path, meaning):
    """Run one at a time, a shard's embeddings are still cached when its next augmenter needs them."""
    (tmp_path / "corpus.txt").write_text("one sentence here\n", encoding="utf-8")
    filters = "filters: {meaning: {encoder: embedded:all-MiniLM-L6-v2}}\n" if meaning else ""
    (tmp_path / "order.yaml").write_text(RECIPE + filters, encoding="utf-8")
    ctx = RunContext(load_recipe(tmp_path / "order.yaml"), StatePaths(tmp_path / "state"))
    plan = stage.AugmentPlan({"same": "h1", "again": "h2"}, [Shard(0, 2), Shard(1, 2)], "s", "e")
    order = [(job.shard.index, job.spec.name, len(job.earlier)) for job in stage.shard_jobs(ctx, plan)]
    if meaning:
        assert order == [(0, "same", 0), (0, "again", 1), (1, "same", 0), (1, "again", 1)]
    else:  # augmenter by augmenter, as before
        assert order == [(0, "same", 0), (1, "same", 0), (0, "again", 0), (1, "again", 0)]
