"""An objective's own settings (`train.options`, validated by its entry's model), the flat
spellings of before, and a plugin objective using every power of a built-in's entry: its
options, its optimiser, its after-step hook and its export hook."""

import json
import logging
import sys

import pytest
import torch
import yaml
from pydantic import ValidationError
from torch import nn
from viewmill.train.config import LEGACY_OPTIONS, TrainConfig
from viewmill.train.export import MANIFEST
from viewmill.train.loop import train_model
from viewmill.train.objectives import OBJECTIVES
from viewmill.train.optimisation import make_optimizer

from tests.conftest import REPO, SENTENCES
from tests.plugins import forget_plugin, install_plugin
from viewmill.registry import RegistryError


def test_every_options_field_has_its_default_so_spelling_a_default_is_the_same_config():
    assert TrainConfig().options == {"momentum": 0.999, "momentum_schedule": "constant", "predictor_k": 8}
    assert TrainConfig(options={"predictor_k": 8}).model_dump() == TrainConfig().model_dump()
    sgopt = TrainConfig(objective="sgopt").objective_options
    assert (sgopt.reg_lambda, sgopt.head_width, sgopt.partner_view) == (0.1, 4096, False)
    assert TrainConfig(objective="isbert").objective_options.windows == (1, 3, 5)
    assert TrainConfig(objective="infonce-distill").objective_options.distill_weight == 200.0
    assert TrainConfig(objective="ntxent").options == {}


def test_the_flat_keys_of_before_still_work_and_say_their_new_spelling(caplog):
    flat = {"bsl": {"momentum": 0.99, "momentum_schedule": "cosine", "predictor_k": 2},
            "sgopt": {"sgopt_lambda": 0.2, "sgopt_head_width": 32, "sgopt_partner_view": True},
            "isbert": {"isbert_filters": 8, "isbert_windows": [1, 3]},
            "infonce-distill": {"distill_weight": 5.0}}  # fmt: skip
    assert {owner for owner, _ in LEGACY_OPTIONS.values()} == set(flat), "every flat key is tried"
    for objective, keys in flat.items():
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="viewmill.train.config"):
            old = TrainConfig(objective=objective, head_warmup_steps=0, **keys)
        new = TrainConfig(objective=objective, head_warmup_steps=0,
                          options={LEGACY_OPTIONS[key][1]: value for key, value in keys.items()})  # fmt: skip
        assert old.model_dump() == new.model_dump()
        spelt = [f"train.{key} is read as train.options.{LEGACY_OPTIONS[key][1]}" for key in keys]
        assert [record.getMessage().split(",")[0] for record in caplog.records] == spelt
    assert TrainConfig(sgopt_lambda=0.3, objective="sgopt").objective_options.reg_lambda == 0.3, "any key order"


def test_a_flat_key_of_another_objective_or_given_twice_is_refused():
    with pytest.raises(ValidationError, match="predictor_k is a setting of objective bsl, not of ntxent: remove it"):
        TrainConfig(objective="ntxent", predictor_k=2)
    with pytest.raises(ValidationError, match="sgopt_lambda is a setting of objective sgopt, not of bsl"):
        TrainConfig(sgopt_lambda=0.2)  # bsl, the default objective
    with pytest.raises(ValidationError, match="momentum and options.momentum are one setting, given twice"):
        TrainConfig(momentum=0.9, options={"momentum": 0.99})


def test_bad_options_are_refused_with_their_place_and_the_objectives_options():
    with pytest.raises(ValidationError) as bad:
        TrainConfig(options={"predictor_k": 0})
    assert [e["loc"] for e in bad.value.errors()] == [("options", "predictor_k")]
    with pytest.raises(ValidationError, match=r"'predictr_k' \(did you mean 'predictor_k'\?\): not an option of "
                       r"objective bsl \(its options are momentum, momentum_schedule, predictor_k\)"):  # fmt: skip
        TrainConfig(options={"predictr_k": 3})
    with pytest.raises(ValidationError, match="not an option of objective ntxent \\(it has none\\)"):
        TrainConfig(objective="ntxent", options={"predictor_k": 2})
    with pytest.raises(ValidationError, match=r"windows must be odd sizes \(same padding\), got \[2\]"):
        TrainConfig(objective="isbert", options={"windows": [2]})


class _Head(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder, self.head = nn.Linear(2, 2), nn.Linear(2, 2)

    def head_parameters(self) -> list[nn.Parameter]:
        return list(self.head.parameters())


def test_each_builtin_keeps_its_optimiser_and_head_learning_rate():
    sgopt = make_optimizer(TrainConfig(objective="sgopt"), _Head())
    assert type(sgopt) is torch.optim.AdamW
    assert [(g["name"], g["lr"], g["betas"], g["weight_decay"]) for g in sgopt.param_groups] == [
        ("encoder", 1e-5, (0.9, 0.9), 0.0), ("head", 5e-5, (0.9, 0.9), 0.0)]  # fmt: skip
    bsl = make_optimizer(TrainConfig(), _Head())
    assert type(bsl) is torch.optim.Adam
    assert [(g["lr"], g["betas"], g["weight_decay"]) for g in bsl.param_groups] == [
        (1e-5, (0.9, 0.999), 0), (1e-3, (0.9, 0.999), 0)]  # fmt: skip
    assert TrainConfig(objective="sgopt", head_lr=1e-3).head_lr == 1e-3, "a head_lr set is kept"


def test_recipes_spell_options_the_new_way():
    """No recipe (its train section, its sweep's settings) uses a flat key of before."""
    for path in sorted((REPO / "recipes").glob("*.yaml")):
        recipe = yaml.safe_load(path.read_text(encoding="utf-8"))
        sweep = recipe.get("sweep") or {}
        keys = set(recipe.get("train") or {}) | {k.removeprefix("train.") for k in sweep.get("grid") or {}}
        keys |= {k.removeprefix("train.") for config in sweep.get("configs") or [] for k in config.get("set") or {}}
        assert not keys & LEGACY_OPTIONS.keys(), path.name


PLUGIN = """
import torch
from pydantic import BaseModel, ConfigDict, Field
from viewmill.train.objectives import Contrastive, Objective
from viewmill.train.pooling import exported_modules

SEEN = {"options": [], "optimizers": [], "steps": []}


class ScaledOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scale: float = Field(1.0, gt=0)


class Scaled(torch.nn.Module):
    def __init__(self, encoder, scale):
        super().__init__()
        self.inner, self.scale = Contrastive(encoder, "infonce", 0.05), scale

    def forward(self, batch, n, *, train_encoder=True):
        return self.scale * self.inner.loss(batch, n)

    def head_parameters(self):
        return []


def build(config, sentence_model):
    SEEN["options"].append(config.objective_options)
    return Scaled(sentence_model[0].auto_model, config.objective_options.scale), exported_modules(sentence_model)


def sgd(groups):
    SEEN["optimizers"].append(torch.optim.SGD(groups, momentum=0.5))
    return SEEN["optimizers"][-1]


def after_step(module, config, step):
    SEEN["steps"].append((type(module).__name__, config.objective_options.scale, step))


def on_export(folder):
    (folder / "scaled.txt").write_text("exported by the plugin", encoding="utf-8")


SCALED = Objective(build=build, head=False, options=ScaledOptions, optimizer=sgd, after_step=after_step,
                   on_export=on_export, description="a scaled InfoNCE")


class LaxOptions(BaseModel):
    scale: float = 1.0


LAX = Objective(build=build, head=False, options=LaxOptions)
"""


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """A distribution as pip leaves it, registering objectives `scaled` and `lax` by entry point."""
    entry = "[viewmill.objectives]\nscaled = viewmill_scaled_plugin:SCALED\nlax = viewmill_scaled_plugin:LAX\n"
    with monkeypatch.context() as patch:
        install_plugin(tmp_path / "site", patch, "viewmill_scaled_plugin", PLUGIN, entry)
        yield
    forget_plugin("viewmill_scaled_plugin")


def test_a_plugin_objectives_options_are_validated(plugin):
    assert TrainConfig(objective="scaled", options={"scale": 2.0}).objective_options.scale == 2.0
    with pytest.raises(ValidationError) as bad:
        TrainConfig(objective="scaled", options={"scale": 0})
    assert [e["loc"] for e in bad.value.errors()] == [("options", "scale")]
    with pytest.raises(ValidationError, match=r"'scael' \(did you mean 'scale'\?\): not an option of objective scaled"):
        TrainConfig(objective="scaled", options={"scael": 2.0})
    with pytest.raises(ValidationError, match="predictor_k is a setting of objective bsl, not of scaled"):
        TrainConfig(objective="scaled", predictor_k=2)
    with pytest.raises(RegistryError, match="the options model LaxOptions must forbid extra keys"):
        OBJECTIVES.get("lax")


def test_a_plugin_objective_trains_with_its_optimiser_and_hooks(tmp_path, tiny_model, plugin):
    config = TrainConfig(objective="scaled", options={"scale": 2.0}, steps=3, batch_size=4, encoder_lr=1e-2)
    out = tmp_path / "model"
    pairs = [(s, s.lower()) for s in SENTENCES[:8]]
    train_model(pairs, str(tiny_model), config, out, card={"snapshot": "s"})
    seen = sys.modules["viewmill_scaled_plugin"].SEEN
    assert [options.scale for options in seen["options"]] == [2.0]
    [optimizer] = seen["optimizers"]
    assert type(optimizer) is torch.optim.SGD and optimizer.param_groups[0]["momentum"] == 0.5
    assert optimizer.param_groups[0]["lr"] == 1e-2
    assert seen["steps"] == [("Scaled", 2.0, 1), ("Scaled", 2.0, 2), ("Scaled", 2.0, 3)]
    assert (out / "scaled.txt").read_text(encoding="utf-8") == "exported by the plugin"
    manifest = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    assert "scaled.txt" in manifest["files_sha256"], "the hook's file is among those the manifest vouches for"
    assert manifest["train_config"]["options"] == {"scale": 2.0}


def test_an_isbert_export_carries_its_code_through_its_entrys_hook(tmp_path):
    (tmp_path / "modules.json").write_text(json.dumps([{"type": "viewmill.train.modeling_isbert.ReLUCNN"}]))
    OBJECTIVES.get("isbert").on_export(tmp_path)
    assert json.loads((tmp_path / "modules.json").read_text()) == [{"type": "modeling_isbert.ReLUCNN"}]
    assert (tmp_path / "modeling_isbert.py").read_bytes() == (REPO / "train" / "modeling_isbert.py").read_bytes()
    assert all(OBJECTIVES.get(name).on_export is None for name in OBJECTIVES.names() if name != "isbert")


def test_the_card_text_comes_from_the_entries():
    from viewmill.train.card import objective_name

    assert objective_name("bsl") == "BSL (bootstrapped sentence representation learning)"
    assert OBJECTIVES.get("distill").citation.startswith("@inproceedings{reimers-2020-multilingual-sentence-bert")
    assert all(OBJECTIVES.get(name).title for name in OBJECTIVES.names()), "every built-in names itself on the card"
