"""STS evaluation: Spearman x100 between cosine similarity and gold scores."""

from __future__ import annotations

import csv
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict
from scipy.stats import spearmanr


class EvalDataError(ValueError):
    """An evaluation file cannot be read; the message names the file and the problem."""


@dataclass(frozen=True)
class StsData:
    s1: list[str]
    s2: list[str]
    gold: np.ndarray
    convention: str


class StsTask(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    format: Literal["stsb", "sick"]
    path: Path


def _read_text(path: Path) -> str:
    if not path.is_file():
        raise EvalDataError(f"evaluation file not found: {path} (fix evaluate.tasks[].path in the recipe)")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise EvalDataError(f"{path}: not valid UTF-8 at byte {exc.start}") from None


def load_stsb(path: Path) -> StsData:
    """STS Benchmark csv: tab separated genre, file, year, id, score, s1, s2 (sometimes more columns)."""
    s1, s2, gold = [], [], []
    for line_no, line in enumerate(_read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        cols = line.split("\t")
        if len(cols) < 7:
            raise EvalDataError(f"{path}:{line_no}: expected at least 7 tab-separated columns, found {len(cols)}")
        try:
            gold.append(float(cols[4]))
        except ValueError:
            raise EvalDataError(f"{path}:{line_no}: score '{cols[4]}' is not a number") from None
        s1.append(cols[5])
        s2.append(cols[6])
    return StsData(s1, s2, np.asarray(gold), f"all {len(gold)} pairs of {path.name}")


def load_sick(path: Path) -> StsData:
    """SICK with a header row: pair_ID, sentence_A, sentence_B, relatedness_score, ..."""
    rows = list(csv.DictReader(_read_text(path).splitlines(), delimiter="\t", quoting=csv.QUOTE_NONE))
    needed = {"sentence_A", "sentence_B", "relatedness_score"}
    if not rows or not needed <= set(rows[0]):
        raise EvalDataError(f"{path}: expected a SICK header with {', '.join(sorted(needed))}")
    return StsData(
        [r["sentence_A"] for r in rows],
        [r["sentence_B"] for r in rows],
        np.asarray([float(r["relatedness_score"]) for r in rows]),
        f"all {len(rows)} pairs of {path.name}"
        + (" (SentEval's SICK-R test split; MTEB's SICK-R uses all 9,927 pairs)" if len(rows) == 4927 else ""),
    )


LOADERS: dict[str, Callable[[Path], StsData]] = {"stsb": load_stsb, "sick": load_sick}


class Embedder:
    """Encodes texts once per model and run: a text seen again is read from the cache."""

    def __init__(self, sentence_model, batch_size: int = 64) -> None:
        self.model = sentence_model
        self.batch_size = batch_size
        self.cache: dict[str, np.ndarray] = {}

    def __call__(self, texts: list[str]) -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if t not in self.cache))
        if missing:
            # sentence-transformers sorts by length inside encode, so padding stays small.
            vectors = self.model.encode(
                missing, batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True
            )
            self.cache.update(zip(missing, vectors, strict=True))
        return np.stack([self.cache[t] for t in texts])


def spearman_x100(embed: Callable[[list[str]], np.ndarray], data: StsData) -> float:
    a, b = embed(data.s1), embed(data.s2)
    cosine = (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return float(spearmanr(cosine, data.gold).statistic * 100)
