"""Work done once: a run loads each model once (none for work that needs none), opens the lake
once per stage (read-only where the stage only reads, and only writers take the lock), and
augmenting with sampling leaves torch's global random state as it was."""

import logging
import sys
from collections import Counter

import pytest
from viewmill.augment.engines import DecodingSpec, make_engine
from viewmill.augment.models import release_models
from viewmill.pipelines.recipe import load_recipe
from viewmill.pipelines.run import RunContext, run_recipe
from viewmill.pipelines.state import StatePaths
from viewmill.storage import lake as lake_module

from tests.conftest import SENTENCES
from tests.tiny_mt import build_tiny_fsmt
from viewmill.settings import Settings

STAGES = {"preflight", "ingest_stage", "augment_plan", "augment_shard", "augment_finish", "pair_stage",
          "train_stage", "publish_model", "evaluate_stage", "begin_run", "end_run", "existing_snapshot"}  # fmt: skip

RECIPE = """
name: loads
corpus: {{format: text, files: [corpus.txt], min_words: 3}}
augmenters:
{augmenters}
filters: {{min_chrf: 0, min_length_ratio: 0, max_length_ratio: 100}}
pair: {{view_a: same, view_b: {partner}, keep_identical: true}}
execution: {{shard_sentences: 8}}
"""
IDENTITY = "  - {name: same, method: identity}\n  - {name: same2, method: identity}"
WITH_HF = (
    "  - {{name: same, method: identity}}\n"
    "  - {{name: bt_de, method: backtranslation, engine: hf, models: [{en_de}, {de_en}], path: [en, de, en],\n"
    "     decoding: {{sampling: true, top_k: 5, seed: 7, max_length_ratio: 1.0}}}}"
)


@pytest.fixture(scope="module")
def tiny_mt(tmp_path_factory):
    root = tmp_path_factory.mktemp("mt")
    return build_tiny_fsmt(root / "en-de"), build_tiny_fsmt(root / "de-en", langs=("de", "en"), seed=1)


@pytest.fixture
def fresh_models():
    release_models()  # other tests in this process may have left weights loaded
    yield
    release_models()


def write_recipe(tmp_path, augmenters: str, partner: str):
    (tmp_path / "corpus.txt").write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    path = tmp_path / "loads.yaml"
    path.write_text(RECIPE.format(augmenters=augmenters, partner=partner), encoding="utf-8")
    return path


def calling_stage() -> str:
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_name not in STAGES:
        frame = frame.f_back
    return frame.f_code.co_name if frame is not None else "outside a stage"


@pytest.fixture
def lake_use(monkeypatch):
    """(stage, "rw" | "ro") per Lake opened, and the stages that took the writer lock."""
    opens: Counter = Counter()
    locks: Counter = Counter()
    init, acquire = lake_module.Lake.__init__, lake_module.WriterLock.acquire

    def counting_init(self, root, *args, read_only=False, **kwargs):
        opens[(calling_stage(), "ro" if read_only else "rw")] += 1
        init(self, root, *args, read_only=read_only, **kwargs)

    def counting_acquire(self, *args, **kwargs):
        locks[calling_stage()] += 1
        acquire(self, *args, **kwargs)

    monkeypatch.setattr(lake_module.Lake, "__init__", counting_init)
    monkeypatch.setattr(lake_module.WriterLock, "acquire", counting_acquire)
    return opens, locks


def model_loads(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "viewmill.models"]


def test_each_model_loads_once_per_run_and_never_for_work_that_needs_none(
    tmp_path, tiny_mt, fresh_models, lake_use, caplog
):
    en_de, de_en = tiny_mt
    recipe = load_recipe(write_recipe(tmp_path, WITH_HF.format(en_de=en_de, de_en=de_en), "bt_de"))
    state = StatePaths(tmp_path / "state")
    caplog.set_level(logging.INFO, logger="viewmill.models")

    first = run_recipe(RunContext(recipe, state, Settings()), train=False)
    assert {name: r["new_views"] for name, r in first["augment"].items()} == {"same": 20, "bt_de": 20}
    assert first["augment"]["bt_de"]["shards"] == 3, "three shards, each needing both models"
    assert model_loads(caplog) == [
        f"loading model {en_de} on device cpu (hf, float32)",
        f"loading model {de_en} on device cpu (hf, float32)",
    ]
    opens, locks = lake_use
    assert dict(opens) == {
        ("ingest_stage", "rw"): 1,
        ("augment_plan", "ro"): 1,
        ("augment_shard", "rw"): 1,  # 2 augmenters x 3 shards run here: one lake kept open for all six
        ("augment_finish", "rw"): 2,
        ("pair_stage", "rw"): 1,
        ("begin_run", "rw"): 1,  # the run's row, `running`
        ("end_run", "rw"): 1,  # and how it ended
    }
    assert set(locks) <= {stage for stage, mode in opens if mode == "rw"}, "only writers take the lock"

    caplog.clear()
    opens.clear()
    locks.clear()
    second = run_recipe(RunContext(recipe, state, Settings()), train=False)
    assert all(r["new_views"] == 0 and r["reused_views"] == 20 for r in second["augment"].values())
    assert model_loads(caplog) == [], "every view exists: no weights are needed"
    assert opens[("augment_finish", "ro")] == 2 and ("augment_finish", "rw") not in opens
    assert "augment_plan" not in locks and "augment_finish" not in locks


def test_an_identity_only_run_loads_no_model(tmp_path, fresh_models, caplog):
    recipe = load_recipe(write_recipe(tmp_path, IDENTITY, "same2"))
    caplog.set_level(logging.INFO, logger="viewmill.models")
    summary = run_recipe(RunContext(recipe, StatePaths(tmp_path / "state"), Settings()), train=False)
    assert summary["snapshot"]["n_pairs"] == 20
    assert model_loads(caplog) == []


def test_sampling_never_moves_the_global_torch_random_state(tiny_mt, fresh_models):
    import torch

    engine = make_engine("hf", "en", "de", model=str(tiny_mt[0]))
    sampling = DecodingSpec(sampling=True, top_k=8, seed=11, max_length_ratio=1.0)
    torch.manual_seed(1234)
    before = torch.random.get_rng_state()
    first = engine.translate(SENTENCES[:4], "en", "de", sampling)
    assert torch.equal(torch.random.get_rng_state(), before)
    torch.manual_seed(99)  # another global state: the sampled views do not depend on it
    assert engine.translate(SENTENCES[:4], "en", "de", sampling) == first
    other_seed = engine.translate(SENTENCES[:4], "en", "de", DecodingSpec(**{**sampling.model_dump(), "seed": 12}))
    assert other_seed != first, "the seed decides the samples"
