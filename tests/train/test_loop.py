import json

import pytest
import torch
from pydantic import ValidationError

from tests.conftest import SENTENCES
from train.loop import MANIFEST, BSLConfig, is_complete_model, train_bsl


def test_training_changes_the_encoder_and_exports_a_loadable_model(tmp_path, tiny_model):
    from sentence_transformers import SentenceTransformer

    pairs = [(s, s.replace("a ", "the ", 1)) for s in SENTENCES]
    config = BSLConfig(steps=4, predictor_warmup_steps=1, batch_size=8, predictor_k=2, encoder_lr=1e-2)
    before = SentenceTransformer(str(tiny_model)).encode(SENTENCES[:3])
    out = tmp_path / "model"
    report = train_bsl(pairs, str(tiny_model), config, out, card={"recipe": "t", "snapshot": "s", "base_model": "b"})
    assert report.steps == 4 and report.pairs == 20
    assert is_complete_model(out) and not out.with_name("model.partial").exists()
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["snapshot"] == "s" and manifest["train_config"]["steps"] == 4
    assert "pairs snapshot: `s`" in (out / "README.md").read_text()
    after = SentenceTransformer(str(out)).encode(SENTENCES[:3])
    assert after.shape == before.shape
    assert not torch.allclose(torch.tensor(after), torch.tensor(before))


def test_training_is_reproducible_with_a_fixed_seed(tmp_path, tiny_model):
    from sentence_transformers import SentenceTransformer

    pairs = [(s, s.lower()) for s in SENTENCES]
    config = BSLConfig(steps=3, predictor_warmup_steps=1, batch_size=8, predictor_k=2, encoder_lr=1e-2)
    vectors = []
    for name in ("a", "b"):
        train_bsl(pairs, str(tiny_model), config, tmp_path / name, card={})
        vectors.append(SentenceTransformer(str(tmp_path / name)).encode(SENTENCES[:4]))
    assert torch.allclose(torch.tensor(vectors[0]), torch.tensor(vectors[1]), atol=1e-6)


def test_warmup_longer_than_training_is_rejected():
    with pytest.raises(ValidationError, match="encoder never trains"):
        BSLConfig(steps=10, predictor_warmup_steps=10)
