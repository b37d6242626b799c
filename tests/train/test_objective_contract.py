"""The training module's contract (`TrainingModule`, `CachedBackward`): every built-in keeps it,
a module that breaks it is refused with the fix, every objective cites its paper on its card,
and a plugin objective keeping it is trained, exported and evaluated through the command line."""

import json
import re

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner
from viewmill.pipelines.cli.app import app
from viewmill.storage.lake import Lake
from viewmill.train.assembly import build_objective
from viewmill.train.card import model_card
from viewmill.train.config import TrainConfig
from viewmill.train.encoder import load_sentence_model
from viewmill.train.export import MANIFEST
from viewmill.train.objectives import (
    OBJECTIVES,
    CachedBackward,
    Objective,
    TrainingModule,
    checked_module,
)

from tests.conftest import SENTENCES, write_sts_fixture
from tests.plugins import forget_plugin, install_plugin
from viewmill.registry import RegistryError

runner = CliRunner()
BUILTINS = ["bsl", "ntxent", "infonce", "sgopt", "isbert", "distill", "infonce-distill"]


def test_every_builtin_module_keeps_the_contract_its_entry_states(tiny_model):
    assert OBJECTIVES.builtin_names() == BUILTINS
    cached = []
    for name in BUILTINS:
        module, _ = build_objective(TrainConfig(objective=name), load_sentence_model(str(tiny_model)))
        assert isinstance(module, torch.nn.Module) and isinstance(module, TrainingModule), name
        if OBJECTIVES.get(name).cached_gradients:
            assert isinstance(module, CachedBackward), name
            cached.append(name)
    assert cached == ["ntxent", "infonce"]


class _NoHead(torch.nn.Module):
    def forward(self, batch, n, *, train_encoder=True):
        return torch.zeros(())


class _Plain(_NoHead):
    def head_parameters(self):
        return []


def test_a_module_that_breaks_the_contract_is_refused_with_the_fix():
    entry = Objective(build=lambda config, model: (None, []), head=False)
    with pytest.raises(RegistryError) as no_head:
        checked_module("mine", entry, _NoHead())
    assert str(no_head.value) == (
        "objective mine's build returned _NoHead, not a torch.nn.Module with forward(batch, n, *, train_encoder) and "
        "head_parameters() (viewmill.train.objectives.TrainingModule): fix the plugin"
    )
    with pytest.raises(RegistryError, match="objective mine's build returned dict, not a torch.nn.Module"):
        checked_module("mine", entry, {"head_parameters": list})
    cached = Objective(build=entry.build, head=False, accumulation=True, cached_gradients=True)
    with pytest.raises(RegistryError) as no_cache:
        checked_module("mine", cached, _Plain())
    assert str(no_cache.value) == (
        "objective mine's entry sets cached_gradients but its module _Plain has no cached_backward(batch, n, chunks, "
        "scale, layout) (viewmill.train.objectives.CachedBackward): add it, or set cached_gradients=False"
    )
    module = _Plain()
    assert checked_module("mine", entry, module) is module


def test_the_objective_setting_names_every_builtin_from_the_registry():
    description = TrainConfig.model_fields["objective"].description
    assert description == f"a registered objective: {', '.join(BUILTINS)} or a plugin's"


def test_every_builtin_objective_cites_its_paper_on_its_card():
    keys = {}
    for name in BUILTINS:
        citation = OBJECTIVES.get(name).citation
        keys[name] = re.findall(r"^@\w+\{([^,]+),$", citation, flags=re.MULTILINE)
        assert citation.count("{") == citation.count("}"), name
        manifest = {"train_config": {"objective": name, "batch_size": 4}, "selected_step": 2,
                    "report": {"steps": 2}, "max_seq_length": 64, "base_model": "b"}  # fmt: skip
        assert f"## Citation\n\n```bibtex\n{citation}\n```" in str(model_card("m", manifest)), name
    distill = ["reimers-2020-multilingual-sentence-bert"]
    assert keys == {
        "bsl": ["zhang-etal-2021-bootstrapped"], "ntxent": ["chen2020simple"],
        "infonce": ["henderson2017efficient", "oord2018representation"], "sgopt": ["kim-etal-2021-self"],
        "isbert": ["zhang-etal-2020-unsupervised"], "distill": distill, "infonce-distill": distill,
    }  # fmt: skip


PLUGIN = '''
import torch
from viewmill.train.objectives import Objective, info_nce
from viewmill.train.pooling import exported_modules, mean_pooled

BUILT = []


class Aligned(torch.nn.Module):
    """In-batch InfoNCE written as a plugin would: a forward and a head, nothing else."""

    def __init__(self, encoder):
        super().__init__()
        self.encoder = encoder

    def forward(self, batch, n, *, train_encoder=True):
        z = mean_pooled(self.encoder, batch)
        return info_nce(z[:n], z[n : 2 * n], 0.05)

    def head_parameters(self):
        return []


def build(config, sentence_model):
    BUILT.append(Aligned(sentence_model[0].auto_model))
    return BUILT[-1], exported_modules(sentence_model)


ALIGNED = Objective(build=build, head=False, description="in-batch InfoNCE, a plugin's",
                    citation="@misc{aligned2026,\\n    title = {A plugin objective},\\n}")
'''


@pytest.fixture
def aligned_plugin(tmp_path, monkeypatch):
    with monkeypatch.context() as patch:
        install_plugin(tmp_path / "site", patch, "viewmill_aligned_plugin", PLUGIN,
                       "[viewmill.objectives]\naligned = viewmill_aligned_plugin:ALIGNED\n")  # fmt: skip
        yield
    forget_plugin("viewmill_aligned_plugin")


def _recipe(folder, tiny_model):
    (folder / "corpus.txt").write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    recipe = folder / "aligned.yaml"
    recipe.write_text(
        f"""
name: aligned
corpus: {{format: text, files: [corpus.txt], min_words: 3}}
augmenters:
  - {{name: same, method: identity}}
  - {{name: same2, method: identity}}
pair: {{view_a: same, view_b: same2, keep_identical: true}}  # SimCSE: dropout makes the views differ
train: {{encoder: {tiny_model}, objective: aligned, steps: 3, batch_size: 8, encoder_lr: 1.0e-2}}
""",
        encoding="utf-8",
    )
    return recipe


def test_a_plugin_objective_is_trained_exported_and_evaluated_through_the_cli(tmp_path, tiny_model, aligned_plugin):
    state = tmp_path / "state"
    result = runner.invoke(app, ["run", str(_recipe(tmp_path, tiny_model)), "--no-prefect", "--state-dir", str(state)])
    assert result.exit_code == 0, result.output
    import viewmill_aligned_plugin as plugin

    [module] = plugin.BUILT
    assert isinstance(module, TrainingModule) and not isinstance(module, CachedBackward)
    with Lake(state / "lake", read_only=True) as lake:
        [row] = lake.arrow("SELECT model_id, path, objective FROM models").to_pylist()
    assert row["objective"] == "aligned"
    folder = state / row["path"]
    manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    assert manifest["train_config"]["objective"] == "aligned" and manifest["report"]["steps"] == 3
    trained, base = load_file(folder / "model.safetensors"), load_file(tiny_model / "model.safetensors")
    assert any(not torch.equal(trained[key], base[key]) for key in base), "the plugin's loss trained the encoder"
    card = (folder / "README.md").read_text(encoding="utf-8")
    assert "the plugin objective aligned (in-batch InfoNCE, a plugin's) (objective `aligned`)" in card
    assert "```bibtex\n@misc{aligned2026,\n    title = {A plugin objective},\n}\n```" in card

    write_sts_fixture(tmp_path / "sts.csv")
    suite = tmp_path / "suite.yaml"
    suite.write_text("tasks: [{name: fixture, format: stsb, path: sts.csv}]\n", encoding="utf-8")
    args = ["eval", row["model_id"][:12], "--suite", str(suite), "--no-baselines", "--state-dir", str(state)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert f"| {folder.name} |" in result.stdout
    with Lake(state / "lake", read_only=True) as lake:
        scored = lake.arrow("SELECT task, metric FROM evals WHERE model = ?", [row["model_id"]]).to_pylist()
    assert scored == [{"task": "fixture", "metric": "spearman_cosine_x100"}]
