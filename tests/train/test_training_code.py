"""What identifies the training code (every module of the train package), and a plugin
objective's model card."""

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from viewmill.train import loop
from viewmill.train.card import model_card
from viewmill.train.config import TrainConfig
from viewmill.train.export import MANIFEST
from viewmill.train.loop import train_model, training_code_fingerprint

from tests.conftest import SENTENCES
from tests.plugins import forget_plugin, install_plugin


def test_a_change_to_any_train_module_changes_the_training_code_fingerprint(tmp_path):
    package = tmp_path / "train"
    shutil.copytree(Path(loop.__file__).parent, package, ignore=shutil.ignore_patterns("__pycache__"))
    assert training_code_fingerprint(package) == training_code_fingerprint(), "the default is the train package"
    modules = sorted(package.glob("*.py"))
    assert {"modeling_isbert.py", "distill.py", "layout.py", "loop.py", "__init__.py"} <= {m.name for m in modules}
    seen = {training_code_fingerprint(package)}
    for module in modules:
        text = module.read_text(encoding="utf-8")
        module.write_text(text + "\n# changed\n", encoding="utf-8")
        seen.add(training_code_fingerprint(package))
        module.write_text(text, encoding="utf-8")
    assert len(seen) == len(modules) + 1, "each module's change gives its own fingerprint"
    (package / "new_module.py").write_text("X = 1\n", encoding="utf-8")
    assert training_code_fingerprint(package) not in seen


PLUGIN = '''
import torch
from viewmill.train.objectives import Contrastive, Objective


class Plain(torch.nn.Module):
    """A plugin's loss with the signature plugins have always had (no layout)."""

    def __init__(self, encoder):
        super().__init__()
        self.inner = Contrastive(encoder, "infonce", 0.05)

    def forward(self, batch, n, *, train_encoder=True):
        assert batch["input_ids"].shape[0] == 2 * n, "a plugin that reads no extra rows gets [a..., b...]"
        return self.inner.loss(batch, n)

    def head_parameters(self):
        return []


def build(config, sentence_model):
    return Plain(sentence_model[0].auto_model), list(sentence_model)


PLAIN = Objective(build=build, head=False, description="in-batch negatives, the plugin way")
'''


@pytest.fixture
def plugin_objective(tmp_path, monkeypatch):
    """A distribution as pip leaves it, registering objective `plain` by entry point."""
    entry = "[viewmill.objectives]\nplain = viewmill_card_plugin:PLAIN\n"
    with monkeypatch.context() as patch:
        install_plugin(tmp_path / "site", patch, "viewmill_card_plugin", PLUGIN, entry)
        yield
    forget_plugin("viewmill_card_plugin")


def test_a_plugin_objective_exports_with_its_description_on_the_card(tmp_path, tiny_model, plugin_objective):
    from sentence_transformers import SentenceTransformer

    table = pa.table({"text_a": SENTENCES, "text_b": [s.lower() for s in SENTENCES], "text_source": SENTENCES})
    config = TrainConfig(objective="plain", steps=2, batch_size=4, encoder_lr=1e-2)
    out = tmp_path / "model"
    train_model(table, str(tiny_model), config, out, card={"snapshot": "s"})
    readme = (out / "README.md").read_text()
    assert "the plugin objective plain (in-batch negatives, the plugin way) (objective `plain`)" in readme
    assert SentenceTransformer(str(out)).encode(SENTENCES[:2]).shape[0] == 2
    assert json.loads((out / MANIFEST).read_text())["train_config"]["objective"] == "plain"


def test_a_card_written_again_after_the_plugin_is_gone_names_the_objective():
    manifest = {"train_config": {"objective": "gone", "batch_size": 4}, "selected_step": 2, "report": {"steps": 2},
                "max_seq_length": 64, "base_model": "b"}  # fmt: skip
    assert "with the plugin objective gone (objective `gone`)" in str(model_card("m", manifest))
