"""What an objective's registry entry is (`Objective`), without torch: validating a recipe's
train section reads entries (options, flags) and must not pay for importing torch. The
training contract the entries' callables meet is `viewmill.train.objectives`'.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from viewmill.registry import RegistryError
from viewmill.specs import Spec


@dataclass(frozen=True)
class Deferred:
    """A callable named "module:attribute", imported on its first call: the built-in entries'
    torch-bound parts, so that reading an entry imports none of them."""

    reference: str

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        module, _, attribute = self.reference.partition(":")
        return getattr(importlib.import_module(module), attribute)(*args, **kwargs)


class NoOptions(Spec):
    """The options of an objective that has none: `train.options` must stay empty."""


@dataclass(frozen=True)
class Objective:
    """A training objective's registry entry, everything viewmill knows of it; plugins add theirs
    in the entry-point group `viewmill.objectives` and have every power a built-in has.

    `build(config, sentence_model)` returns the training module (a `TrainingModule`; with
    `cached_gradients` a `CachedBackward`) and the sentence-transformers modules to export,
    sharing its weights. An entry with `negatives` or `needs_source` gets those rows after views a
    and b and its module's loss `layout=`; other entries get the plain [a..., b...] batch.
    `options` is a pydantic model (extra="forbid") of its own settings, read from `train.options`
    and handed to `build` and the hooks as `config.objective_options`."""

    build: Callable[[Any, Any], tuple[Any, list[Any]]]  # (a TrainingModule, torch.nn.Modules to export)
    head: bool = True  # a head that warms up before the encoder trains
    temperature: float | None = None  # default temperature, where the loss has one
    accumulation: bool = False  # grad_accumulation > 1 keeps the loss unchanged
    description: str = ""
    negatives: bool = False  # trains on hard negatives (a `negatives` column); others refuse pairs with them
    needs_source: bool = False  # reads the source sentence (a `text_source` column, else view a)
    # (module, config, step) after every optimiser step that trained the encoder: BSL's EMA
    after_step: Callable[[Any, Any, int], None] | None = None
    options: type[BaseModel] = NoOptions
    # the optimiser (a torch.optim.Optimizer) over the parameter groups (encoder; head, each with its lr)
    optimizer: Callable[[list[dict[str, Any]]], Any] = Deferred("torch.optim:Adam")
    safe_head_lr: float | None = None  # preset safe's head_lr where the recipe sets none (else TrainConfig's)
    # its module's loss is over in-batch negatives (every rank's under torchrun): accumulation
    # re-embeds through `cached_backward` (GradCache), without fp16 loss scaling
    cached_gradients: bool = False
    on_export: Callable[[Path], None] | None = None  # adds files to the export folder (before its hashes)
    title: str = ""  # the model card's name for it (a plugin without one: its name and description)
    citation: str = ""  # BibTeX of the paper it follows, for the model card
    remote_code: str = ""  # set: the export carries its own code; the card says this and loads it trusted


def check_objective(value: Objective) -> Objective:
    """The registry's check of an entry: its options are a pydantic model that forbids extra keys."""
    options = value.options
    if not (isinstance(options, type) and issubclass(options, BaseModel)):
        raise RegistryError(f"an objective's options must be a pydantic model class, not {options!r}")
    if options.model_config.get("extra") != "forbid":
        raise RegistryError(
            f"the options model {options.__name__} must forbid extra keys (model_config = ConfigDict(extra='forbid')), "
            "or a misspelt option would be dropped without a word"
        )
    return value


def paper_citation(*keys: str) -> str:
    """The BibTeX entries `keys` of citations.bib (the papers viewmill's objectives follow),
    for an entry's `citation`."""
    entries = _bibtex_entries()
    return "\n".join(entries[key] for key in keys)


@cache
def _bibtex_entries() -> dict[str, str]:
    text = Path(__file__).with_name("citations.bib").read_text(encoding="utf-8")
    entries = text.strip().split("\n\n")  # one blank line between entries, none inside one
    return {entry[entry.index("{") + 1 : entry.index(",")]: entry for entry in entries}
