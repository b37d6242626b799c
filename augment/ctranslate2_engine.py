"""The CTranslate2 engine: the seq2seq models of neural.py converted once per revision
(weights kept float32, quantised at load: int8 on CPU, float16 on GPU by default)."""

from __future__ import annotations

import json
from functools import cached_property
from pathlib import Path
from typing import Any

from viewmill.augment.engines import DecodingSpec, Engine, EngineError
from viewmill.augment.models import load_once
from viewmill.augment.neural import Seq2SeqEngine
from viewmill.storage.files import build_dir_atomically, user_cache_dir
from viewmill.storage.ids import fingerprint

from viewmill.cpu import apply_ct2_isa, cpu_cores
from viewmill.extras import require

MAX_WORKERS = 4  # CPU batches decoded at once
CT2_TYPES = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32")


def _target_vocabulary(model_dir: Path) -> set[str]:
    for name in ("target_vocabulary.json", "shared_vocabulary.json"):
        if (model_dir / name).is_file():
            return set(json.loads((model_dir / name).read_text(encoding="utf-8")))
    for name in ("target_vocabulary.txt", "shared_vocabulary.txt"):
        if (model_dir / name).is_file():
            return set((model_dir / name).read_text(encoding="utf-8").splitlines())
    return set()


def ct2_cache_dir() -> Path:
    return user_cache_dir() / "ctranslate2"


def convert_to_ct2(ref: str, revision: str, model_type: str) -> Path:
    """Convert once per model revision into the cache (weights kept float32; quantised at load)."""
    ctranslate2 = require("ctranslate2", "the ctranslate2 engine")

    target = ct2_cache_dir() / fingerprint(ref, revision)[:20]
    if (target / "model.bin").is_file():
        return target

    def convert(staging: Path) -> None:
        if model_type == "fsmt":
            from viewmill.augment.ct2_fsmt import FSMTConverter

            FSMTConverter(ref).convert(str(staging), force=True)
        else:
            ctranslate2.converters.TransformersConverter(ref).convert(str(staging), force=True)

    return build_dir_atomically(target, convert)


class CT2Engine(Seq2SeqEngine):
    """CTranslate2: int8 on CPU and float16 on GPU by default; `compute_type` overrides.
    Conversion and loading happen at the first batch."""

    name = "ctranslate2"
    compute_types = CT2_TYPES

    def default_compute_type(self, device: str) -> str:
        return "int8" if device == "cpu" else "float16"

    def _check_device(self, device: str) -> None:
        ctranslate2 = require("ctranslate2", "the ctranslate2 engine")

        if device.startswith("cuda") and ctranslate2.get_cuda_device_count() == 0:
            raise EngineError(
                f"{self.ref}: device {device} asked for, but CTranslate2 sees no CUDA GPU: use device cpu"
            )

    def _output_revision(self) -> str:
        # One float32 conversion serves every compute type (quantised at load) ...
        return f"{self.weights_revision}:{self.compute_type}"  # ... but quantisation changes outputs

    @cached_property
    def _converted(self) -> tuple[Path, list[list[str]] | None]:
        """The converted model's folder and the tokens to suppress: once per engine, not per
        translator (sampling loads one per call)."""
        model_dir = convert_to_ct2(self.ref, self.weights_revision, self.hf_config.model_type)
        # Some conversions drop the padding token (Marian's); suppress it where it exists.
        pad = self.tokenizer.pad_token
        return model_dir, [[pad]] if pad and pad in _target_vocabulary(model_dir) else None

    def _load(self, parallel: bool) -> tuple[Any, list[list[str]] | None]:
        ctranslate2 = require("ctranslate2", "the ctranslate2 engine")

        model_dir, suppress = self._converted
        if self.device == "cpu":
            apply_ct2_isa()  # before CTranslate2 first reads it
        cores = cpu_cores()
        # On CPU, batches side by side beat every core on one batch (BENCHMARKS.md, 2 cores:
        # small batches' GEMMs do not split well). Up to 4 at once, sharing the cores: a call
        # often makes only a few batches, and a batch's length cap depends on its members, so
        # batches are not cut smaller to feed more workers.
        inter = min(cores, MAX_WORKERS) if parallel else 1
        intra = max(1, cores // inter)
        translator = ctranslate2.Translator(
            str(model_dir), device=self.device, compute_type=self.compute_type, inter_threads=inter, intra_threads=intra
        )
        return translator, suppress

    def _loaded(self) -> tuple[Any, list[list[str]] | None]:
        parallel = self._parallel()
        variant = f"{self.compute_type}:{'parallel' if parallel else 'one-worker'}"
        return load_once("ctranslate2", self.ref, self.device, variant, lambda: self._load(parallel))

    @property
    def translator(self) -> Any:
        """The translator that greedy and beam decoding use."""
        return self._loaded()[0]

    def _parallel(self) -> bool:
        return self.device == "cpu" and cpu_cores() > 1

    def _generate_batches(
        self, batches: list[list[list[int]]], tgt: str, decoding: DecodingSpec
    ) -> list[list[list[str]]]:
        """Every batch submitted at once, so each of CTranslate2's workers decodes one."""
        if decoding.sampling:
            return self._sample(batches, tgt, decoding)
        translator, suppress = self._loaded()
        pending = []
        for batch_ids in batches:
            sources = [self.tokenizer.convert_ids_to_tokens(ids) for ids in batch_ids]
            kwargs = self._options(sources, tgt, decoding, suppress)
            pending.append(translator.translate_batch(sources, asynchronous=True, **kwargs))
        return [self._texts([result.result() for result in batch]) for batch in pending]

    def _sample(self, batches: list[list[list[int]]], tgt: str, decoding: DecodingSpec) -> list[list[list[str]]]:
        """Sampling on a translator of its own, loaded for this call: CTranslate2 seeds a
        worker thread's generator once, when the thread first samples, and set_random_seed
        never reseeds it, so a long-lived translator would ignore every later seed."""
        ctranslate2 = require("ctranslate2", "the ctranslate2 engine")

        ctranslate2.set_random_seed(decoding.seed)
        translator, suppress = self._load(parallel=False)
        sampling = {"sampling_topk": decoding.top_k or 0, "sampling_topp": decoding.top_p,
                    "sampling_temperature": decoding.temperature}  # fmt: skip
        try:
            out = []
            for batch_ids in batches:
                sources = [self.tokenizer.convert_ids_to_tokens(ids) for ids in batch_ids]
                kwargs = self._options(sources, tgt, decoding, suppress) | sampling
                out.append(self._texts(translator.translate_batch(sources, **kwargs)))
            return out
        finally:
            translator.unload_model()

    def _options(
        self, sources: list[list[str]], tgt: str, decoding: DecodingSpec, suppress: list[list[str]] | None
    ) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "beam_size": 1 if decoding.sampling else decoding.beam_size,
            "num_hypotheses": decoding.num_hypotheses,
            "max_decoding_length": self._max_new_tokens(max(len(s) for s in sources), decoding),
            "suppress_sequences": suppress,
            "return_scores": False,
        }
        target = self.family.target_token(tgt)
        if target is not None:
            kwargs["target_prefix"] = [[target]] * len(sources)
        return kwargs

    def _texts(self, results: list[Any]) -> list[list[str]]:
        out = []
        for result in results:
            hyps = []
            for tokens in result.hypotheses:
                ids = self.tokenizer.convert_tokens_to_ids(tokens)
                hyps.append(self.tokenizer.decode(ids, skip_special_tokens=True).strip())
            out.append(hyps)
        return out


CT2_ENGINE = Engine(CT2Engine.from_options, needs_model=True, description="the same models converted to CTranslate2")
