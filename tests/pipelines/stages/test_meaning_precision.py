"""The meaning encoder in bf16 where training would be (`auto`): its own identity, so views
judged in bf16 never answer for fp32 ones, embeddings close to fp32's, and shard workers
embedding in the precision the run was planned with, whatever their own CPU."""

import numpy as np
import pytest
from viewmill.augment.meaning import MeaningSpec
from viewmill.augment.models import release_models
from viewmill.augment.views import Shard
from viewmill.pipelines.context import RunContext
from viewmill.pipelines.recipe import load_recipe
from viewmill.pipelines.stages import augment as stage
from viewmill.pipelines.state import StatePaths

from tests.pipelines.stages.test_meaning_embeds_once import RECIPE

TEXTS = ["A man is playing a guitar.", "Someone plays the guitar.", "A dog runs in the park.",
         "Un perro corre en el parque.", "Two children are eating lunch outside.", "The sky is blue."]  # fmt: skip


@pytest.fixture(autouse=True)
def no_loaded_encoders():
    release_models()
    yield
    release_models()


def test_a_bf16_judge_has_its_own_identity_and_embeddings_close_to_fp32():
    fp32, bf16 = (stage.meaning_judge(MeaningSpec(), precision) for precision in ("fp32", "bf16"))
    assert bf16.encoder_identity == fp32.encoder_identity + "+bf16"
    assert (fp32.precision, bf16.precision) == ("fp32", "bf16")
    full, half = fp32.embed(TEXTS), bf16.embed(TEXTS)
    assert half.dtype == np.float32 and half.shape == full.shape
    cosines = (full * half).sum(1) / np.linalg.norm(full, axis=1) / np.linalg.norm(half, axis=1)
    assert cosines.min() > 0.99
    assert not np.array_equal(full, half)  # bf16 really ran


def test_auto_follows_the_pin_and_an_explicit_precision_wins(monkeypatch):
    monkeypatch.setenv("VIEWMILL_AUTO_PRECISION", "bf16")
    assert stage.meaning_judge(MeaningSpec()).precision == "bf16"
    assert stage.meaning_judge(MeaningSpec(), "fp32").precision == "fp32"  # the plan's, on a worker
    monkeypatch.setenv("VIEWMILL_AUTO_PRECISION", "fp32")
    assert stage.meaning_judge(MeaningSpec()).encoder_identity.endswith("+bf16") is False
    with pytest.raises(ValueError, match="precision is 'fp16': fp32 or bf16"):
        stage.meaning_judge(MeaningSpec(), "fp16")


def test_shard_jobs_carry_the_plans_precision(tmp_path):
    (tmp_path / "corpus.txt").write_text("one sentence here\n", encoding="utf-8")
    recipe = RECIPE + "filters: {meaning: {encoder: embedded:all-MiniLM-L6-v2}}\n"
    (tmp_path / "order.yaml").write_text(recipe, encoding="utf-8")
    ctx = RunContext(load_recipe(tmp_path / "order.yaml"), StatePaths(tmp_path / "state"))
    plan = stage.AugmentPlan({"same": "h1", "again": "h2"}, [Shard(0, 2)], "s", "e", meaning_precision="bf16")
    jobs = stage.shard_jobs(ctx, plan)
    assert [job.meaning_precision for job in jobs] == ["bf16", "bf16"]
    assert all(job.kwargs()["meaning_precision"] == "bf16" for job in jobs)


def test_the_filter_stores_for_a_miner_of_its_own_encoder_and_precision_only(monkeypatch, tiny_model):
    from viewmill.storage.negatives import NliContradictions
    from viewmill.train.mining import MinedNegatives

    monkeypatch.setenv("VIEWMILL_AUTO_PRECISION", "bf16")
    judge, miner = stage.meaning_judge(MeaningSpec()), MinedNegatives(source="mined")
    assert stage.shares_embeddings(judge, miner) and miner.reads() == ("embeddings",)
    assert not stage.shares_embeddings(judge, MinedNegatives(source="mined", store=False))
    assert MinedNegatives(source="mined", store=False).reads() == ()
    assert not stage.shares_embeddings(judge, MinedNegatives(source="mined", encoder=str(tiny_model)))
    assert not stage.shares_embeddings(stage.meaning_judge(MeaningSpec(), "fp32"), miner)  # another precision
    assert not stage.shares_embeddings(judge, NliContradictions(source="nli-contradiction"))
    assert not stage.shares_embeddings(None, miner)
    assert not judge.store  # a judge stores only where the recipe's miner shares its encoder (recipe_judge)
