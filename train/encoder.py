"""Resolving, loading and fingerprinting sentence encoders."""

from __future__ import annotations

import json
from pathlib import Path

from viewmill.storage.ids import dir_fingerprint
from viewmill.train.embedded import EmbeddedError, embedded_path
from viewmill.train.model_files import ModelFilesError, check_model_files, check_model_folder

from viewmill.paths import leads_nowhere, nowhere

EMBEDDED_PREFIX = "embedded:"


class EncoderError(ValueError):
    """An encoder reference cannot be resolved; the message says how to fix it."""


def resolve_encoder(ref: str, base_dir: Path | None = None) -> str:
    """A local directory path for `embedded:NAME` or a path; hub ids pass through unchanged."""
    if ref.startswith(EMBEDDED_PREFIX):
        try:
            return str(embedded_path(ref.removeprefix(EMBEDDED_PREFIX)))
        except EmbeddedError as exc:
            raise EncoderError(str(exc)) from exc
    path = Path(ref) if Path(ref).is_absolute() or base_dir is None else base_dir / ref
    if leads_nowhere(path):
        raise EncoderError(nowhere("model folder", path, "point at the model folder itself"))
    if path.exists():
        check_local_model(path)
        return str(path.resolve())
    if ref.startswith((".", "/")) or ref.count("/") > 1:
        raise EncoderError(f"encoder directory not found: {path}")
    return ref  # a hub id, loaded by sentence-transformers when a hub is reachable


def check_local_model(path: Path) -> None:
    """Before anything loads: not a system folder, a config.json, bounded tokenizer files and
    safetensors headers that agree with their files and the config (model_files.py)."""
    try:
        check_model_folder(path)
        if not (path / "config.json").is_file():
            raise EncoderError(f"{path} is not a transformers/sentence-transformers model directory (no config.json)")
        check_model_files(path)
    except ModelFilesError as exc:
        raise EncoderError(str(exc)) from None


def encoder_fingerprint(resolved: str) -> str:
    """Content hash of a local model's weights and configs; a hub id is its own fingerprint."""
    path = Path(resolved)
    return dir_fingerprint(path) if path.is_dir() else resolved


CNN_REF = "modeling_isbert.ReLUCNN"  # the Hugging Face convention: <file in the model dir>.<class>
MODELING_FILE = "modeling_isbert.py"  # that file, carried in an IS-BERT export
LEGACY_CNN_REFS = ("train.objectives.ReLUCNN", "viewmill.train.objectives.ReLUCNN")  # exports before CNN_REF


def module_types(resolved: str) -> list[str]:
    """The module classes a local sentence-transformers directory names in modules.json."""
    modules = Path(resolved) / "modules.json"
    if not modules.is_file():
        return []
    return [m["type"] for m in json.loads(modules.read_text(encoding="utf-8"))]


def load_sentence_model(resolved: str, device: str = "cpu", pooling: str | None = None):
    """A SentenceTransformer; a plain transformers encoder gets mean pooling added by the library.

    `pooling` ("mean" or "cls") rebuilds the model as its transformer plus that pooling:
    the papers' untrained baselines. An IS-BERT export's CNN (its own `modeling_isbert.py`,
    or viewmill's class in models exported before that) is resolved to viewmill's class,
    so viewmill never runs code from a model directory.
    """
    from sentence_transformers import SentenceTransformer

    types = module_types(resolved)
    custom = [t for t in types if not t.startswith("sentence_transformers.")]
    if custom:
        unknown = sorted(set(custom) - {CNN_REF, *LEGACY_CNN_REFS})
        if unknown:
            raise EncoderError(
                f"{resolved} needs its own code ({', '.join(unknown)}): viewmill does not run a model's code; "
                "load it with SentenceTransformer(path, trust_remote_code=True) after reading that code"
            )
        from viewmill.train.legacy_isbert import ReLUCNN as LegacyReLUCNN
        from viewmill.train.modeling_isbert import ReLUCNN

        classes = {CNN_REF: ReLUCNN, **dict.fromkeys(LEGACY_CNN_REFS, LegacyReLUCNN)}
        # sentence-transformers' own hook for classes already imported (no trust_remote_code).
        model = SentenceTransformer._load_with_module_classes(resolved, classes, device=device)
    else:
        model = SentenceTransformer(resolved, device=device)
    if pooling is None:
        return model
    from sentence_transformers.sentence_transformer.modules import Pooling

    transformer = model[0]
    dim = transformer.get_embedding_dimension()
    return SentenceTransformer(modules=[transformer, Pooling(dim, pooling_mode=pooling)], device=device)


def encode_in(model, texts: list[str], precision: str, device: str = "cpu", **options):
    """`model.encode(texts, convert_to_tensor=True, ...)` under `precision`'s autocast ("bf16",
    or "fp32": none), as one float32 tensor on the CPU: what the meaning filter and the miner
    both embed with, so `auto`'s bf16 reaches them the one way."""
    import torch

    with torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=precision == "bf16"):
        vectors = model.encode(texts, convert_to_tensor=True, show_progress_bar=False, **options)
    return torch.as_tensor(vectors).detach().float().cpu().contiguous()  # as_tensor: a model that returns arrays
