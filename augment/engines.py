"""Translation engines behind one interface: a batch of texts in, hypotheses in input order out.

This module holds the interface and the engine registry only; the implementations
(`apertium`, `neural`, plugins) sit above it and are loaded by name.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from pydantic import ConfigDict, Field
from viewmill.storage.ids import canonical_json

from viewmill.allocator import program_env
from viewmill.registry import Registry, RegistryError
from viewmill.specs import Seed, Spec


class EngineError(RuntimeError):
    """An engine cannot run the request; the message names the problem and the fix."""


class DecodingSpec(Spec):
    """How hypotheses are produced. Rule-based engines ignore everything but `num_hypotheses`."""

    model_config = ConfigDict(frozen=True)

    beam_size: int = Field(1, ge=1, le=128)
    sampling: bool = False
    top_k: int = Field(0, ge=0, le=1_000_000)
    top_p: float = Field(1.0, gt=0, le=1)
    temperature: float = Field(1.0, ge=1e-3, le=100)
    num_hypotheses: int = Field(1, ge=1, le=128)
    max_length_ratio: float = Field(3.0, gt=0, le=100)
    seed: Seed = 0

    def canonical(self) -> str:
        """Canonical JSON used in cache keys (the seed is keyed separately)."""
        return canonical_json(self.model_dump(exclude={"seed"}))


class TranslationEngine(Protocol):
    name: str
    model: str
    revision: str

    def translate(self, texts: list[str], src: str, tgt: str, decoding: DecodingSpec) -> list[list[str]]:
        """Hypotheses per input text, in input order."""
        ...

    def close(self) -> None:
        """Release processes or models the engine holds."""
        ...


def debian_version(package: str) -> str:
    try:
        out = subprocess.run(
            ["dpkg-query", "-W", "-f=${Version}", package],
            capture_output=True,
            text=True,
            check=False,
            env=program_env(),
        )
    except FileNotFoundError:
        return "unknown"
    return out.stdout.strip() or "unknown"


@dataclass(frozen=True)
class EngineOptions:
    """What a recipe says about an engine besides its direction."""

    model: str | None = None  # a hub id or a local directory
    device: str = "cpu"
    compute_type: str | None = None
    max_batch_tokens: int | None = None


@dataclass(frozen=True)
class Engine:
    """A registry entry: how to build an engine for one direction. `build` should read only
    configuration (tokenizer, config, version) and leave weights for the first translation."""

    build: Callable[[str, str, EngineOptions], TranslationEngine]
    needs_model: bool
    description: str = ""
    # A sentence's translation does not depend on the others in its batch (rule-based MT; not
    # neural engines, whose padding and batched kernels move the last bits).
    batch_invariant: bool = False


# Implementations live above this module and are loaded by name on first use.
ENGINES: Registry[Engine] = Registry(
    "viewmill.engines",
    "engine",
    {
        "apertium": "viewmill.augment.apertium:ENGINE",
        "hf": "viewmill.augment.neural:HF_ENGINE",
        "ctranslate2": "viewmill.augment.ctranslate2_engine:CT2_ENGINE",
        "bergamot": "viewmill.augment.bergamot:ENGINE",
    },
    entry_type=Engine,
)


def make_engine(
    engine: str,
    src: str,
    tgt: str,
    model: str | None = None,
    device: str = "cpu",
    compute_type: str | None = None,
    max_batch_tokens: int | None = None,
) -> TranslationEngine:
    """An engine for one direction. Engines that need a model take a hub id or a local directory."""
    try:
        entry = ENGINES.get(engine)
    except RegistryError as exc:
        raise EngineError(str(exc)) from None
    if entry.needs_model and not model:
        raise EngineError(f"engine '{engine}' needs a model for {src}>{tgt} (a hub id or a local directory)")
    return entry.build(src, tgt, EngineOptions(model, device, compute_type, max_batch_tokens))
