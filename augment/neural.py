"""Neural MT engines: transformers seq2seq models and their CTranslate2 conversions.

One code path for FSMT (WMT'19), Marian (OPUS-MT), M2M100 and NLLB-200: the tokenizer and
model come from a hub id or a local directory; multilingual models get the source language
set on the tokenizer and the target language forced as the first generated token.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Self

from viewmill.augment.engines import DecodingSpec, Engine, EngineError, EngineOptions
from viewmill.augment.models import load_once
from viewmill.storage.ids import dir_fingerprint

# ISO 639-1 -> FLORES-200 codes used by NLLB.
NLLB_CODES = {
    "en": "eng_Latn", "de": "deu_Latn", "fr": "fra_Latn", "es": "spa_Latn", "ca": "cat_Latn", "it": "ita_Latn",
    "pt": "por_Latn", "nl": "nld_Latn", "ar": "arb_Arab", "tr": "tur_Latn", "ru": "rus_Cyrl", "zh": "zho_Hans",
    "ja": "jpn_Jpan", "pl": "pol_Latn",
}  # fmt: skip


def model_revision(ref: str, config: Any) -> str:
    """The hub commit a model came from, or the content hash of a local directory."""
    path = Path(ref)
    if path.is_dir():
        return dir_fingerprint(path)[:16]
    return getattr(config, "_commit_hash", None) or "unknown"


class Seq2SeqFamily:
    """What differs between model families: language checks, source tokens, forced target.
    This base is a bilingual model's (Marian): nothing to check or set, no forced token."""

    def __init__(self, ref: str, tokenizer: Any, config: Any) -> None:
        self.ref, self.tokenizer, self.config = ref, tokenizer, config

    @staticmethod
    def matches(tokenizer: Any, config: Any) -> bool:
        return config.model_type == "marian"

    def check(self, src: str, tgt: str) -> None:
        """Refuses a language pair the model cannot translate, naming it."""

    def set_source(self, src: str) -> None:
        """Tells the tokenizer the source language, for the tokens it adds to the input."""

    def target_token(self, tgt: str) -> str | None:
        """The token generation starts with, where the model needs the target forced."""
        return None

    def _known(self, token: str | None) -> bool:
        # Language tokens are added tokens: get_vocab() may not list them, ids do.
        return token is not None and self.tokenizer.convert_tokens_to_ids(token) != self.tokenizer.unk_token_id

    def max_source_tokens(self) -> int:
        limits = [getattr(self.config, "max_position_embeddings", None), self.tokenizer.model_max_length]
        return min(limit for limit in limits if limit and limit < 10**9)


class FsmtFamily(Seq2SeqFamily):
    """FSMT (WMT'19): one language pair a model, named in its config."""

    @staticmethod
    def matches(tokenizer: Any, config: Any) -> bool:
        return config.model_type == "fsmt"

    def check(self, src: str, tgt: str) -> None:
        if list(self.config.langs) != [src, tgt]:
            raise EngineError(f"{self.ref} translates {'>'.join(self.config.langs)}, not {src}>{tgt}")


class NllbFamily(Seq2SeqFamily):
    """NLLB-200 (an M2M100 model with its own tokenizer): FLORES-200 language codes."""

    @staticmethod
    def matches(tokenizer: Any, config: Any) -> bool:
        return type(tokenizer).__name__.startswith("Nllb")

    def check(self, src: str, tgt: str) -> None:
        for lang in (src, tgt):
            if not self._known(NLLB_CODES.get(lang)):
                raise EngineError(f"{self.ref}: no NLLB language code for '{lang}' (known: {sorted(NLLB_CODES)})")

    def set_source(self, src: str) -> None:
        self.tokenizer.src_lang = NLLB_CODES[src]

    def target_token(self, tgt: str) -> str | None:
        return NLLB_CODES[tgt]


class M2m100Family(Seq2SeqFamily):
    """M2M100: ISO 639-1 codes, each language a token of the tokenizer."""

    @staticmethod
    def matches(tokenizer: Any, config: Any) -> bool:
        return config.model_type == "m2m_100"

    def check(self, src: str, tgt: str) -> None:
        for lang in (src, tgt):
            if not self._known(self._lang_token(lang)):
                raise EngineError(f"{self.ref}: M2M100 has no language '{lang}'")

    def _lang_token(self, lang: str) -> str | None:
        try:
            return self.tokenizer.get_lang_token(lang)
        except KeyError:
            return None

    def set_source(self, src: str) -> None:
        self.tokenizer.src_lang = src

    def target_token(self, tgt: str) -> str | None:
        return self.tokenizer.get_lang_token(tgt)


# In the order tried: NLLB before M2M100, whose model type NLLB shares.
FAMILIES: tuple[type[Seq2SeqFamily], ...] = (FsmtFamily, Seq2SeqFamily, NllbFamily, M2m100Family)


def seq2seq_family(ref: str, tokenizer: Any, config: Any) -> Seq2SeqFamily:
    """The family of the model at `ref`, from its tokenizer and config."""
    for family in FAMILIES:
        if family.matches(tokenizer, config):
            return family(ref, tokenizer, config)
    raise EngineError(f"{ref}: model type '{config.model_type}' is not a supported translation model")


def _load_tokenizer_and_config(ref: str):
    from transformers import AutoConfig, AutoTokenizer

    try:
        config = AutoConfig.from_pretrained(ref)
    except (OSError, ValueError) as exc:
        raise EngineError(f"cannot load a model config from '{ref}': {exc}") from None
    if not getattr(config, "is_encoder_decoder", False):
        raise EngineError(f"'{ref}' is a {config.model_type} model, not a translation (encoder-decoder) model")
    return AutoTokenizer.from_pretrained(ref), config


def length_batches(lengths: list[int], max_batch_tokens: int, parallel: int = 1) -> list[list[int]]:
    """Indices sorted by length, packed so that (longest in batch) x (batch size) x `parallel`
    (hypotheses decoded at once per sentence: the beam) <= budget."""
    batches: list[list[int]] = []
    current: list[int] = []
    for index in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        if current and lengths[index] * (len(current) + 1) * parallel > max_batch_tokens:
            batches.append(current)
            current = []
        current.append(index)
    if current:
        batches.append(current)
    return batches


class Seq2SeqEngine:
    """Shared by both engines: loading, checks, batching, too-long inputs, output order."""

    name = "seq2seq"
    compute_types: tuple[str, ...] = ()

    def __init__(
        self,
        ref: str,
        src: str,
        tgt: str,
        device: str = "cpu",
        compute_type: str | None = None,
        max_batch_tokens: int = 4096,
    ) -> None:
        self.ref, self.src, self.tgt = ref, src, tgt
        self.tokenizer, self.hf_config = _load_tokenizer_and_config(ref)
        self.family = seq2seq_family(ref, self.tokenizer, self.hf_config)
        self.family.check(src, tgt)
        self.model = ref
        self.weights_revision = model_revision(ref, self.hf_config)
        self.max_batch_tokens = max_batch_tokens
        self.max_source = self.family.max_source_tokens()
        self.compute_type = compute_type or self.default_compute_type(device)
        if self.compute_type not in self.compute_types:
            types = ", ".join(self.compute_types)
            raise EngineError(f"{self.name} compute_type '{self.compute_type}' is not one of {types}")
        self._check_device(device)
        self.device = device
        self.revision = self._output_revision()

    @classmethod
    def from_options(cls, src: str, tgt: str, options: EngineOptions) -> Self:
        """The registry's build: an engine for one direction from a recipe's options."""
        assert options.model is not None
        return cls(
            options.model, src, tgt, device=options.device, compute_type=options.compute_type,
            max_batch_tokens=batch_budget(options),
        )  # fmt: skip

    def default_compute_type(self, device: str) -> str:
        raise NotImplementedError

    def _check_device(self, device: str) -> None:
        """Loads the runtime (a missing one fails here) and refuses a GPU it does not see."""
        raise NotImplementedError

    def _output_revision(self) -> str:
        """The revision views record: the weights', plus whatever changes their outputs."""
        raise NotImplementedError

    def translate(self, texts: list[str], src: str, tgt: str, decoding: DecodingSpec) -> list[list[str]]:
        if (src, tgt) != (self.src, self.tgt):
            raise EngineError(f"this {self.name} engine translates {self.src}>{self.tgt}, not {src}>{tgt}")
        self.family.set_source(src)
        ids = [self.tokenizer(text)["input_ids"] for text in texts]
        out: list[list[str]] = [[""] * decoding.num_hypotheses for _ in texts]
        # Empty and over-long inputs get empty hypotheses (rejected as 'empty' downstream)
        # instead of failing or silently truncating the batch they are in.
        usable = [i for i, (text, tokens) in enumerate(zip(texts, ids, strict=True))
                  if text.strip() and len(tokens) <= self.max_source]  # fmt: skip
        # A beam of k decodes k hypotheses per sentence: the budget counts them all, so a
        # beam-4 batch holds a quarter of a greedy one (memory and CPU cache stay bounded).
        parallel = decoding.num_hypotheses if decoding.sampling else decoding.beam_size
        lengths = [len(ids[i]) for i in usable]
        batches = [[usable[b] for b in batch] for batch in length_batches(lengths, self.max_batch_tokens, parallel)]
        hypotheses = self._generate_batches([[ids[i] for i in members] for members in batches], tgt, decoding)
        for members, batch_hypotheses in zip(batches, hypotheses, strict=True):
            for i, hyps in zip(members, batch_hypotheses, strict=True):
                out[i] = hyps
        return out

    def _generate_batches(
        self, batches: list[list[list[int]]], tgt: str, decoding: DecodingSpec
    ) -> list[list[list[str]]]:
        return [self._generate(batch_ids, tgt, decoding) for batch_ids in batches]

    def _max_new_tokens(self, source_length: int, decoding: DecodingSpec) -> int:
        # The decoder's positions bound it too (its start token takes one): a model that has not
        # stopped by then would index past its position table (transformers: IndexError).
        return min(max(4, math.ceil(source_length * decoding.max_length_ratio)), self.max_source - 1)

    def _generate(self, batch_ids: list[list[int]], tgt: str, decoding: DecodingSpec) -> list[list[str]]:
        raise NotImplementedError

    def close(self) -> None:
        pass


HF_DTYPES = ("float32", "float16", "bfloat16")


class HFEngine(Seq2SeqEngine):
    """transformers generate(): greedy, beam search or sampling. Weights load at the first batch."""

    name = "hf"
    compute_types = HF_DTYPES

    def default_compute_type(self, device: str) -> str:
        return "float32"

    def _check_device(self, device: str) -> None:
        import torch

        if device.startswith("cuda") and not torch.cuda.is_available():
            raise EngineError(f"{self.ref}: device {device} asked for, but torch sees no CUDA GPU: use device cpu")

    def _output_revision(self) -> str:
        if self.compute_type == "float32":
            return self.weights_revision
        return f"{self.weights_revision}:{self.compute_type}"  # half precision changes outputs

    @property
    def net(self) -> Any:
        def load() -> Any:
            import torch
            from transformers import AutoModelForSeq2SeqLM

            dtype = getattr(torch, self.compute_type)
            return AutoModelForSeq2SeqLM.from_pretrained(self.ref, dtype=dtype).to(self.device).eval()

        return load_once("hf", self.ref, self.device, self.compute_type, load)

    def _generate(self, batch_ids: list[list[int]], tgt: str, decoding: DecodingSpec) -> list[list[str]]:
        import torch

        pad = self.tokenizer.pad_token_id
        width = max(len(ids) for ids in batch_ids)
        input_ids = torch.tensor([ids + [pad] * (width - len(ids)) for ids in batch_ids], device=self.device)
        mask = (input_ids != pad).long()
        kwargs: dict[str, Any] = {
            "num_beams": decoding.beam_size,
            "do_sample": decoding.sampling,
            "num_return_sequences": decoding.num_hypotheses,
            "max_new_tokens": self._max_new_tokens(width, decoding),
            "suppress_tokens": [pad],  # a translation never contains padding
            "forced_eos_token_id": None,  # same truncation rule as CTranslate2
        }
        if decoding.sampling:
            kwargs.update(top_k=decoding.top_k or None, top_p=decoding.top_p, temperature=decoding.temperature)
        target = self.family.target_token(tgt)
        if target is not None:
            kwargs["forced_bos_token_id"] = self.tokenizer.convert_tokens_to_ids(target)
        net = self.net
        # generate() samples from the global generator: seed it in a fork that is restored
        # afterwards, so augmenting never moves training's random stream.
        devices = [torch.device(self.device)] if torch.device(self.device).type == "cuda" else []
        with torch.random.fork_rng(devices=devices), torch.inference_mode():
            torch.manual_seed(decoding.seed)
            generated = net.generate(input_ids=input_ids, attention_mask=mask, **kwargs)
        texts = self.tokenizer.batch_decode(generated, skip_special_tokens=True)
        n = decoding.num_hypotheses
        return [[t.strip() for t in texts[i * n : (i + 1) * n]] for i in range(len(batch_ids))]


def batch_budget(options: EngineOptions) -> int:
    # GPUs keep getting faster up to batches of ~1,000 sentences (BENCHMARKS.md); CPUs do not.
    return options.max_batch_tokens or (4096 if options.device == "cpu" else 32768)


HF_ENGINE = Engine(
    HFEngine.from_options, needs_model=True, description="transformers seq2seq models (FSMT, Marian, M2M100, NLLB)"
)
