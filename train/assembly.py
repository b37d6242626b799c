"""The objective's training module and the sentence-transformers model exported with it,
built from a base model by the objective's registry entry."""

from __future__ import annotations

from torch import nn
from viewmill.train.config import TrainConfig
from viewmill.train.encoder import load_sentence_model
from viewmill.train.objectives import OBJECTIVES, TrainingModule, checked_module


def build_objective(config: TrainConfig, sentence_model) -> tuple[TrainingModule, list[nn.Module]]:
    """The objective's training module and the sentence-transformers modules to export.

    The exported modules share their weights with the training module, so what is saved
    at the end is what was trained; the pooling is the one the loss trains (every built-in
    drops a base model's own pooling and Dense layers; Normalize does not change cosines).
    A module that breaks the contract its entry states is refused here, before training.
    """
    entry = OBJECTIVES.get(config.objective)
    module, exported = entry.build(config, sentence_model)
    return checked_module(config.objective, entry, module), exported


def prepare(config: TrainConfig, base_model: str, device: str = "cpu"):
    """The objective, the sentence-transformers model to export (sharing its weights, truncating
    at `config.max_length` as training does) and the tokenizer."""
    from sentence_transformers import SentenceTransformer

    sentence_model = load_sentence_model(base_model, device=device)
    sentence_model[0].max_seq_length = config.max_length
    objective, export_modules = build_objective(config, sentence_model)
    objective.to(device)
    return objective, SentenceTransformer(modules=export_modules, device=device), sentence_model.tokenizer
