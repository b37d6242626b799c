"""The objective's training module and the sentence-transformers model exported with it,
built from a base model (its plugins build their own)."""

from __future__ import annotations

from torch import nn
from viewmill.train.bsl import BSL
from viewmill.train.config import TrainConfig
from viewmill.train.distill import AnchoredContrastive, Distill
from viewmill.train.encoder import load_sentence_model
from viewmill.train.objectives import ISBERT, OBJECTIVES, SGOPT, Contrastive


def build_objective(config: TrainConfig, sentence_model) -> tuple[nn.Module, list[nn.Module]]:
    """The objective's training module and the sentence-transformers modules to export.

    The exported modules share their weights with the training module, so what is saved
    at the end is what was trained; the pooling is the one the loss trains (a base
    model's own pooling and Dense layers are dropped; Normalize does not change cosines).
    """
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling

    plugin = OBJECTIVES.get(config.objective).build
    if plugin is not None:  # a registered plugin builds its own
        return plugin(config, sentence_model)
    transformer = sentence_model[0]
    encoder = transformer.auto_model
    dim = sentence_model.get_embedding_dimension()
    tail = [m for m in list(sentence_model)[1:] if isinstance(m, Normalize)]
    mean = [transformer, Pooling(dim, pooling_mode="mean"), *tail]  # the pooling the loss trains, whatever the base had
    if config.objective == "bsl":
        return BSL(encoder, dim, config.predictor_k), mean
    if config.objective in ("ntxent", "infonce"):
        return Contrastive(encoder, config.objective, config.temperature, config.hard_negative_weight), mean
    if config.objective == "distill":  # the teacher is a frozen copy inside the module, never exported
        return Distill(encoder), mean
    if config.objective == "infonce-distill":
        return AnchoredContrastive(encoder, config.temperature, config.distill_weight), mean
    if config.objective == "sgopt":
        model = SGOPT(
            encoder, dim, temperature=config.temperature, reg_lambda=config.sgopt_lambda,
            head_width=config.sgopt_head_width, fixed_reads_partner=config.sgopt_partner_view,
        )  # fmt: skip
        return model, [transformer, Pooling(dim, pooling_mode="cls"), *tail]  # c_i is BERT_T's [CLS]
    model = ISBERT(encoder, dim, config.isbert_filters, config.isbert_windows)
    return model, [transformer, model.cnn, Pooling(model.cnn.get_sentence_embedding_dimension(), "mean")]


def prepare(config: TrainConfig, base_model: str, device: str = "cpu"):
    """The objective, the sentence-transformers model to export (sharing its weights, truncating
    at `config.max_length` as training does) and the tokenizer."""
    from sentence_transformers import SentenceTransformer

    sentence_model = load_sentence_model(base_model, device=device)
    sentence_model[0].max_seq_length = config.max_length
    objective, export_modules = build_objective(config, sentence_model)
    objective.to(device)
    return objective, SentenceTransformer(modules=export_modules, device=device), sentence_model.tokenizer
