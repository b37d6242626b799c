"""Translation engines behind one interface: a batch of texts in, hypotheses in input order out."""

from __future__ import annotations

import shutil
import subprocess
from functools import cache
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from storage.ids import canonical_json


class EngineError(RuntimeError):
    """An engine cannot run the request; the message names the problem and the fix."""


class DecodingSpec(BaseModel):
    """How hypotheses are produced. Rule-based engines ignore everything but `num_hypotheses`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    beam_size: int = Field(1, ge=1)
    sampling: bool = False
    top_k: int = Field(0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    temperature: float = Field(1.0, gt=0)
    num_hypotheses: int = Field(1, ge=1)
    max_length_ratio: float = Field(3.0, gt=0)
    seed: int = 0

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


# ISO 639-1 -> Apertium's ISO 639-3 codes for the language pairs viewmill knows.
APERTIUM_CODES = {"en": "eng", "es": "spa", "ca": "cat", "fr": "fra", "de": "deu", "pt": "por", "it": "ita"}


@cache
def apertium_modes() -> frozenset[str]:
    binary = shutil.which("apertium")
    if binary is None:
        raise EngineError(
            "Apertium is not installed: apt-get install apertium apertium-eng-spa apertium-eng-cat "
            "(the quick start does this for you)"
        )
    out = subprocess.run([binary, "-l"], capture_output=True, text=True, check=True).stdout
    return frozenset(line.strip() for line in out.splitlines() if line.strip())


def _debian_version(package: str) -> str:
    try:
        out = subprocess.run(
            ["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True, check=False
        )
    except FileNotFoundError:
        return "unknown"
    return out.stdout.strip() or "unknown"


class ApertiumEngine:
    """Rule-based MT through the `apertium` command, one sentence per line.

    Text mode keeps final punctuation (line mode drops it) and newlines pass through as
    blanks, so the output is checked to have exactly one line per input.

    Deterministic, so the decoding spec only matters through `num_hypotheses` (always 1 here).
    """

    name = "apertium"

    def __init__(self, src: str, tgt: str) -> None:
        self.mode = self.mode_for(src, tgt)
        pair = sorted(self.mode.split("-"))
        self.package = f"apertium-{'-'.join(sorted(pair, key=lambda c: c != 'eng'))}"
        self.model = self.package
        self.revision = _debian_version(self.package)

    @staticmethod
    def mode_for(src: str, tgt: str) -> str:
        codes = [APERTIUM_CODES.get(lang) for lang in (src, tgt)]
        if None in codes:
            raise EngineError(f"apertium: no language code known for {src}>{tgt}; use one of {sorted(APERTIUM_CODES)}")
        mode = f"{codes[0]}-{codes[1]}"
        if mode not in apertium_modes():
            package = "apertium-" + "-".join(sorted(codes, key=lambda c: c != "eng"))
            raise EngineError(
                f"apertium has no {src}>{tgt} direction ({mode}): apt-get install {package} "
                f"(installed directions: {', '.join(sorted(apertium_modes()))})"
            )
        return mode

    def translate(self, texts: list[str], src: str, tgt: str, decoding: DecodingSpec) -> list[list[str]]:
        if self.mode != self.mode_for(src, tgt):
            raise EngineError(f"this apertium engine translates {self.mode}, not {src}>{tgt}")
        if not texts:
            return []
        if any("\n" in t or "\r" in t for t in texts):
            raise EngineError("apertium needs single-line texts: normalise whitespace first")
        proc = subprocess.run(
            ["apertium", "-u", self.mode],
            input="\n".join(texts) + "\n",
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise EngineError(f"apertium {self.mode} failed (exit {proc.returncode}): {proc.stderr.strip()[:500]}")
        lines = proc.stdout.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        if len(lines) != len(texts):
            raise EngineError(
                f"apertium {self.mode} returned {len(lines)} lines for {len(texts)} inputs; the batch was not written"
            )
        return [[line.strip()] for line in lines]


def make_engine(engine: str, src: str, tgt: str) -> TranslationEngine:
    if engine == "apertium":
        return ApertiumEngine(src, tgt)
    raise EngineError(f"unknown engine '{engine}': available here: apertium")
