"""Masked-LM replacement: mask about `ratio` of a sentence's tokens and let a masked
language model (roberta-base by default, any MLM from a hub or a directory) fill them."""

from __future__ import annotations

import random
from typing import Any

from viewmill.augment.engines import EngineError
from viewmill.augment.models import load_once


class MaskedFiller:
    def __init__(self, ref: str, device: str = "cpu") -> None:
        from transformers import AutoConfig, AutoTokenizer

        try:
            config = AutoConfig.from_pretrained(ref)
        except (OSError, ValueError) as exc:
            raise EngineError(f"cannot load a model config from '{ref}': {exc}") from None
        if not any(arch.endswith("ForMaskedLM") for arch in (config.architectures or [])):
            raise EngineError(f"'{ref}' is not a masked language model (architectures: {config.architectures})")
        self.tokenizer = AutoTokenizer.from_pretrained(ref)
        if self.tokenizer.mask_token is None:
            raise EngineError(f"the tokenizer of '{ref}' has no mask token")
        self.ref, self.config, self.device = ref, config, device
        self.special = set(self.tokenizer.all_special_ids)

    @property
    def net(self) -> Any:
        """The weights, loaded at the first batch that needs them."""
        from transformers import AutoModelForMaskedLM

        return load_once("mlm", self.ref, self.device, "float32",
                         lambda: AutoModelForMaskedLM.from_pretrained(self.ref).to(self.device).eval())  # fmt: skip

    def fill(self, texts: list[str], ratio: float, seeds: list[int]) -> list[tuple[str, int]]:
        """(new text, tokens replaced) per text; each replacement differs from the original token."""
        import torch

        encoded = self.tokenizer(texts, padding=True, truncation=True, return_tensors="pt")
        ids = encoded["input_ids"].clone()
        masked: list[list[int]] = []
        for row, seed in enumerate(seeds):
            positions = [i for i, t in enumerate(ids[row].tolist()) if t not in self.special]
            count = max(1, round(ratio * len(positions))) if positions else 0
            chosen = sorted(random.Random(seed).sample(positions, count))
            masked.append(chosen)
            ids[row, chosen] = self.tokenizer.mask_token_id
        original = encoded["input_ids"]
        with torch.no_grad():  # not inference_mode: the scores are edited in place below
            logits = self.net(input_ids=ids.to(self.device), attention_mask=encoded["attention_mask"].to(self.device))
        scores = logits.logits.float().cpu().clone()
        scores[:, :, list(self.special)] = -float("inf")
        out = []
        for row, chosen in enumerate(masked):
            filled = original[row].clone()
            for position in chosen:
                scores[row, position, original[row, position]] = -float("inf")  # always a change
                filled[position] = int(scores[row, position].argmax())
            text = self.tokenizer.decode(filled, skip_special_tokens=True, clean_up_tokenization_spaces=True)
            out.append((" ".join(text.split()), len(chosen)))
        return out

    def identity(self) -> list[Any]:
        from viewmill.augment.neural import model_revision

        return [self.tokenizer.name_or_path, model_revision(self.tokenizer.name_or_path, self.config)]
