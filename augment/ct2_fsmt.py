"""A CTranslate2 converter for FSMT, the transformers port of fairseq's WMT'19 models.

CTranslate2 converts fairseq checkpoints, but fairseq does not install on Python 3.11+,
and its transformers converter has no FSMT loader. FSMT keeps fairseq's architecture
(post-norm Transformer, sinusoidal positions offset by the padding index, separate source
and target vocabularies, decoding starts from </s>), so it maps onto ctranslate2's public
TransformerSpec the way fairseq models do.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from ctranslate2.converters import utils
from ctranslate2.converters.converter import Converter
from ctranslate2.specs import common_spec, transformer_spec

ACTIVATIONS = {
    "relu": common_spec.Activation.RELU,
    "gelu": common_spec.Activation.GELU,
    "swish": common_spec.Activation.SWISH,
}


def _array(tensor) -> np.ndarray:
    return tensor.detach().float().cpu().numpy()


def _linear(spec, module) -> None:
    spec.weight = _array(module.weight)
    if module.bias is not None:
        spec.bias = _array(module.bias)


def _layer_norm(spec, module) -> None:
    spec.gamma = _array(module.weight)
    spec.beta = _array(module.bias)


def _attention(spec, module, self_attention: bool) -> None:
    if self_attention:  # ctranslate2 fuses q, k, v into one projection
        parts = [common_spec.LinearSpec() for _ in range(3)]
        for part, proj in zip(parts, (module.q_proj, module.k_proj, module.v_proj), strict=True):
            _linear(part, proj)
        utils.fuse_linear(spec.linear[0], parts)
    else:  # query alone, then key and value fused
        _linear(spec.linear[0], module.q_proj)
        parts = [common_spec.LinearSpec() for _ in range(2)]
        _linear(parts[0], module.k_proj)
        _linear(parts[1], module.v_proj)
        utils.fuse_linear(spec.linear[1], parts)
    _linear(spec.linear[-1], module.out_proj)


def _inputs(spec, module) -> None:
    embeddings = spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings
    embeddings.weight = _array(module.embed_tokens.weight)
    # fairseq positions start at padding_idx + 1; ctranslate2 indexes them from 0.
    spec.position_encodings.encodings = _array(module.embed_positions.weight)[module.padding_idx + 1 :]
    spec.scale_embeddings = float(module.embed_scale)


def _ffn(spec, layer) -> None:
    _layer_norm(spec.layer_norm, layer.final_layer_norm)
    _linear(spec.linear_0, layer.fc1)
    _linear(spec.linear_1, layer.fc2)


def _vocabulary(path: Path) -> list[str]:
    vocab = json.loads(path.read_text(encoding="utf-8"))
    tokens = [token for token, _ in sorted(vocab.items(), key=lambda item: item[1])]
    if [vocab[t] for t in tokens] != list(range(len(tokens))):
        raise ValueError(f"{path}: token ids are not 0..{len(tokens) - 1}")
    return tokens


class FSMTConverter(Converter):
    """Converts a transformers FSMT model directory (or hub id) to a CTranslate2 model."""

    def __init__(self, model_name_or_path: str) -> None:
        self.model_name_or_path = model_name_or_path

    def _load(self):
        import torch
        from transformers import FSMTForConditionalGeneration, FSMTTokenizer

        model = FSMTForConditionalGeneration.from_pretrained(self.model_name_or_path).eval()
        tokenizer = FSMTTokenizer.from_pretrained(self.model_name_or_path)
        config = model.config
        if config.activation_function not in ACTIVATIONS:
            raise ValueError(f"FSMT activation '{config.activation_function}' has no CTranslate2 equivalent")
        if config.encoder_attention_heads != config.decoder_attention_heads:
            raise ValueError("CTranslate2 needs the same number of attention heads in encoder and decoder")
        spec = transformer_spec.TransformerSpec.from_config(
            (config.encoder_layers, config.decoder_layers),
            config.encoder_attention_heads,
            pre_norm=False,
            activation=ACTIVATIONS[config.activation_function],
        )
        with torch.no_grad():
            encoder, decoder = model.model.encoder, model.model.decoder
            _inputs(spec.encoder, encoder)
            for layer_spec, layer in zip(spec.encoder.layer, encoder.layers, strict=True):
                _attention(layer_spec.self_attention, layer.self_attn, self_attention=True)
                _layer_norm(layer_spec.self_attention.layer_norm, layer.self_attn_layer_norm)
                _ffn(layer_spec.ffn, layer)
            _inputs(spec.decoder, decoder)
            _linear(spec.decoder.projection, decoder.output_projection)
            for layer_spec, layer in zip(spec.decoder.layer, decoder.layers, strict=True):
                _attention(layer_spec.self_attention, layer.self_attn, self_attention=True)
                _layer_norm(layer_spec.self_attention.layer_norm, layer.self_attn_layer_norm)
                _attention(layer_spec.attention, layer.encoder_attn, self_attention=False)
                _layer_norm(layer_spec.attention.layer_norm, layer.encoder_attn_layer_norm)
                _ffn(layer_spec.ffn, layer)
        files = tokenizer.vocab_files_names
        base = Path(tokenizer.name_or_path) if Path(tokenizer.name_or_path).is_dir() else None
        if base is None:
            from huggingface_hub import snapshot_download

            base = Path(snapshot_download(self.model_name_or_path, allow_patterns=["*.json", "*.txt"]))
        spec.register_source_vocabulary(_vocabulary(base / files["src_vocab_file"]))
        spec.register_target_vocabulary(_vocabulary(base / files["tgt_vocab_file"]))
        spec.config.decoder_start_token = "</s>"  # FSMT's decoder_start_token_id is eos
        spec.config.add_source_eos = False  # callers pass the tokenizer's ids, </s> included
        return spec
