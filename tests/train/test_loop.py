import json

import pytest
import torch
from pydantic import ValidationError
from viewmill.train.config import TrainConfig
from viewmill.train.export import MANIFEST, is_complete_model
from viewmill.train.loop import train_model

from tests.conftest import SENTENCES


def test_training_changes_the_encoder_and_exports_a_loadable_model(tmp_path, tiny_model):
    from sentence_transformers import SentenceTransformer

    pairs = [(s, s.replace("a ", "the ", 1)) for s in SENTENCES]
    config = TrainConfig(steps=4, predictor_warmup_steps=1, batch_size=8, options={"predictor_k": 2}, encoder_lr=1e-2)
    before = SentenceTransformer(str(tiny_model)).encode(SENTENCES[:3])
    out = tmp_path / "model"
    report = train_model(pairs, str(tiny_model), config, out, card={"recipe": "t", "snapshot": "s", "base_model": "b"})
    assert report.steps == 4 and report.pairs == 20
    assert is_complete_model(out) and not out.with_name("model.partial").exists()
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["snapshot"] == "s" and manifest["train_config"]["steps"] == 4
    assert "pairs snapshot: `s`" in (out / "README.md").read_text()
    after = SentenceTransformer(str(out)).encode(SENTENCES[:3])
    assert after.shape == before.shape
    assert not torch.allclose(torch.tensor(after), torch.tensor(before))


@pytest.mark.parametrize("pinned", ["bf16", "fp32"])
def test_precision_auto_is_resolved_where_training_runs_and_the_manifest_keeps_what_ran(
    tmp_path, tiny_model, monkeypatch, pinned
):
    monkeypatch.setenv("VIEWMILL_AUTO_PRECISION", pinned)  # what auto_precision would pick on such a CPU
    pairs = [(s, s.replace("a ", "the ", 1)) for s in SENTENCES]
    config = TrainConfig(steps=2, batch_size=8, objective="infonce", encoder_lr=1e-3)
    assert config.precision == "auto"
    train_model(pairs, str(tiny_model), config, tmp_path / "model", card={})
    manifest = json.loads((tmp_path / "model" / MANIFEST).read_text())
    assert manifest["train_config"]["precision"] == pinned


def test_training_is_reproducible_with_a_fixed_seed(tmp_path, tiny_model):
    from sentence_transformers import SentenceTransformer

    pairs = [(s, s.lower()) for s in SENTENCES]
    config = TrainConfig(steps=3, predictor_warmup_steps=1, batch_size=8, options={"predictor_k": 2}, encoder_lr=1e-2)
    vectors = []
    for name in ("a", "b"):
        train_model(pairs, str(tiny_model), config, tmp_path / name, card={})
        vectors.append(SentenceTransformer(str(tmp_path / name)).encode(SENTENCES[:4]))
    assert torch.allclose(torch.tensor(vectors[0]), torch.tensor(vectors[1]), atol=1e-6)


def test_warmup_longer_than_training_is_rejected():
    with pytest.raises(ValidationError, match="encoder never trains"):
        TrainConfig(steps=10, predictor_warmup_steps=10)


@pytest.mark.parametrize(
    ("objective", "extra", "pooling"),
    [
        ("ntxent", {}, "mean"),
        ("infonce", {}, "mean"),
        ("sgopt", {"head_warmup_steps": 1, "options": {"head_width": 32, "partner_view": True}}, "cls"),
        ("isbert", {"head_warmup_steps": 1, "options": {"filters": 8}}, "mean"),
    ],
)
def test_every_objective_trains_and_exports_a_model_that_loads(tmp_path, tiny_model, objective, extra, pooling):
    from sentence_transformers import SentenceTransformer

    pairs = [(s, s.replace("a ", "the ", 1)) for s in SENTENCES]
    config = TrainConfig(objective=objective, steps=3, batch_size=8, encoder_lr=1e-2, **extra)
    out = tmp_path / objective
    report = train_model(pairs, str(tiny_model), config, out, card={"recipe": "t", "snapshot": "s"})
    assert report.steps == 3
    loaded = SentenceTransformer(str(out), trust_remote_code=objective == "isbert")
    pooling_config = json.loads(next(out.glob("*Pooling/config.json")).read_text())
    assert pooling_config["pooling_mode"] == pooling
    vectors = loaded.encode(SENTENCES[:3])
    if objective == "isbert":
        assert vectors.shape == (3, 8 * 3), "the sentence is the mean of the CNN's n-gram features"
    assert torch.isfinite(torch.tensor(vectors)).all()
    assert f"(objective `{objective}`)" in (out / "README.md").read_text()


def test_headless_objectives_refuse_a_warmup_and_get_their_defaults():
    assert TrainConfig(objective="ntxent").head_warmup_steps == 0
    assert TrainConfig(objective="ntxent").temperature == 0.05
    assert TrainConfig(objective="sgopt").temperature == 0.01
    assert TrainConfig(objective="bsl").head_warmup_steps == 40
    with pytest.raises(ValidationError, match="ntxent has no head to warm up"):
        TrainConfig(objective="ntxent", head_warmup_steps=5)
    with pytest.raises(ValidationError, match="odd sizes"):
        TrainConfig(objective="isbert", options={"windows": (2, 3)})
    with pytest.raises(ValidationError, match="sgopt's loss would change with it"):
        TrainConfig(objective="sgopt", grad_accumulation=2)
    with pytest.raises(ValidationError, match="use precision bf16"):
        TrainConfig(objective="ntxent", grad_accumulation=2, precision="fp16")


def test_arrow_pairs_train_exactly_like_a_list_and_the_predictor_is_not_exported(tmp_path, tiny_model):
    import pyarrow as pa
    from safetensors import safe_open
    from sentence_transformers import SentenceTransformer

    pairs = [(s, s.lower()) for s in SENTENCES]
    table = pa.table({"text_a": [a for a, _ in pairs], "text_b": [b for _, b in pairs]})
    config = TrainConfig(steps=3, head_warmup_steps=1, batch_size=8, options={"predictor_k": 2}, encoder_lr=1e-2)
    train_model(pairs, str(tiny_model), config, tmp_path / "list", card={})
    train_model(table, str(tiny_model), config, tmp_path / "arrow", card={})
    a, b = (SentenceTransformer(str(tmp_path / n)).encode(SENTENCES[:3]) for n in ("list", "arrow"))
    assert torch.allclose(torch.tensor(a), torch.tensor(b), atol=1e-6)
    with safe_open(str(tmp_path / "arrow" / "model.safetensors"), "pt") as weights:
        names = list(weights.keys())
    assert names and not any("predictor" in n or "target" in n for n in names), "inference is the online encoder"


def test_momentum_schedules():
    from viewmill.train.bsl import target_momentum

    constant = TrainConfig(steps=100, options={"momentum": 0.99}).objective_options
    assert {target_momentum(constant, 100, s) for s in (1, 50, 100)} == {0.99}
    cosine = TrainConfig(steps=101, options={"momentum": 0.99, "momentum_schedule": "cosine"}).objective_options
    values = [target_momentum(cosine, 101, s) for s in range(1, 102)]
    assert values[0] == pytest.approx(0.99) and values[-1] == pytest.approx(1.0)
    assert values[50] == pytest.approx(0.995), "halfway between m and 1 at the middle step"
    from itertools import pairwise

    assert all(a <= b for a, b in pairwise(values)), "never decreases"


def test_paper_preset_is_one_learning_rate_without_warm_up_and_safe_is_the_default():
    safe = TrainConfig()
    assert (safe.preset, safe.head_warmup_steps, safe.encoder_lr, safe.head_lr, safe.keep_best) == (
        "safe",
        40,
        1e-5,
        1e-3,
        True,
    )
    paper = TrainConfig(preset="paper")
    assert (paper.head_warmup_steps, paper.encoder_lr, paper.head_lr, paper.keep_best) == (0, 5e-4, 5e-4, False)
    tuned = TrainConfig(preset="paper", encoder_lr=1e-5, keep_best=True)
    assert (tuned.encoder_lr, tuned.head_lr, tuned.keep_best) == (1e-5, 1e-5, True)
    with pytest.raises(ValueError, match="one learning rate"):
        TrainConfig(preset="paper", encoder_lr=1e-5, head_lr=1e-3)
    with pytest.raises(ValueError, match="no head warm-up"):
        TrainConfig(preset="paper", head_warmup_steps=10)
