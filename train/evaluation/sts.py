"""STS evaluation: Spearman x100 between cosine similarity and gold scores."""

from __future__ import annotations

import csv
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, field_validator, model_validator
from viewmill.storage.datasets.fetching import missing_hint

from viewmill.registry import Registry, RegistryError
from viewmill.specs import Spec


class EvalDataError(ValueError):
    """An evaluation file cannot be read; the message names the file and the problem."""


@dataclass(frozen=True)
class StsData:
    s1: list[str]
    s2: list[str]
    gold: np.ndarray
    convention: str
    unscored: int = 0  # pairs with a blank gold line, skipped
    skipped: str | None = None  # why this set is not scored (it cannot be read reliably)


LANG = r"^[a-z]{2,3}$"  # an ISO 639 code, as stsb-multi-mt names its files


class StsTask(Spec):
    """One STS benchmark. `format` is a registered STS format (`STS_FORMATS`, a plugin's in the
    entry-point group `viewmill.sts_formats`); viewmill's own:

    - `stsb`: an STS Benchmark csv; `sick`: one SICK file (SentEval's SICK-R uses the test
      file, 4,927 pairs); `sick-all`: a folder with SICK's train, trial and test files
      (MTEB's SICK-R: all 9,927 pairs).
    - `senteval-sts`: a SentEval STS folder (STS12-en-test, ...): STS.input.X.txt with
      STS.gs.X.txt per subset; `sts17`: one SemEval-2017 Task 1 track (`track`: en-en, es-es,
      ar-ar, es-en, ar-en, tr-en) in the official layout (inputs in `path`, gold files in
      `gold_path` or beside them). STS 2017 is reported per track: the tracks' concatenation
      mixes languages and is no score. A track whose input and gold files do not line up is
      skipped with a message (the official tr-en input has 500 lines for 250 gold scores),
      unless `gold_alignment: first-lines` pairs the gold scores with the first input lines
      (what SentEval does by pasting the files side by side).
    - `stsb-xling`: STS-B in any pair of stsb-multi-mt's languages (a folder of
      stsb-<lang>-<split>.csv, whose rows line up across languages): first sentences in `lang_a`
      (default en), second sentences in `lang_b`; cross-lingual (en-de, pt-es) or one language
      (pt-pt). `split`: dev, test (default) or train.
    """

    name: str
    format: str
    path: Path
    gold_path: Path | None = None
    lang_a: str | None = Field(None, pattern=LANG)  # stsb-xling only: the first sentences' language (default en)
    lang_b: str | None = Field(None, pattern=LANG)  # stsb-xling only: the second sentences' language
    split: Literal["dev", "test", "train"] | None = None  # stsb-xling only: stsb-<lang>-<split>.csv (default test)
    track: str | None = None
    gold_alignment: Literal["strict", "first-lines"] = "strict"

    @field_validator("format")
    @classmethod
    def _registered_format(cls, fmt: str) -> str:
        if fmt not in STS_FORMATS:
            raise ValueError(STS_FORMATS.unknown(fmt))
        return fmt

    @model_validator(mode="after")
    def _settings_of_the_format(self) -> StsTask:
        entry = STS_FORMATS[self.format]
        _refuse_unread_settings(self, entry)
        entry.check(self)
        return self


# The optional settings a format may read, with their defaults; a format's entry names those it reads.
FORMAT_SETTINGS = {"track": None, "gold_alignment": "strict", "split": None, "lang_a": None, "lang_b": None}


def _refuse_unread_settings(task: StsTask, entry: StsFormat) -> None:
    stray = [name for name, default in FORMAT_SETTINGS.items()
             if name not in entry.settings and getattr(task, name) != default]  # fmt: skip
    if not stray:
        return
    settings = _settings_read()
    readers = [fmt for fmt, read in settings.items() if stray[0] in read]
    group = [name for name in FORMAT_SETTINGS if any(name in settings[fmt] for fmt in readers)]
    listed = " and ".join(filter(None, (", ".join(group[:-1]), group[-1])))
    formats = f"format{'s' if len(readers) > 1 else ''} {', '.join(readers)}"
    raise ValueError(f"{listed} apply to {formats} only: remove them from task {task.name}")


def _settings_read() -> dict[str, tuple[str, ...]]:
    """Each format's settings, for a message: a plugin that cannot be loaded is left out (a
    task of its own format says why), so it never hides the task's own mistake."""
    read = {}
    for fmt in STS_FORMATS.names():
        try:
            read[fmt] = STS_FORMATS[fmt].settings
        except RegistryError:
            continue
    return read


def _as_it_is(task: StsTask) -> None:
    return None


def _no_dataset(get: Callable[[str], Any]) -> dict[str, str | None] | None:
    return None


@dataclass(frozen=True)
class StsFormat:
    """An STS task format, the registry's entry: what evaluation, the recipe and model cards
    rely on (a plugin sets them as viewmill's own formats do)."""

    load: Callable[[StsTask], dict[str, StsData]]  # the task's data by subset; a single set is the subset "all"
    settings: tuple[str, ...] = ()  # the FORMAT_SETTINGS it reads; a task of this format sets no others
    check: Callable[[StsTask], None] = _as_it_is  # its settings checked (ValueError naming the fix), defaults filled
    # For model cards: {"id", "config", "split"} of the Hugging Face data set a task's files are,
    # from the task's settings (`get(key)`: a task object's or its JSON form's); None if unknown.
    dataset: Callable[[Callable[[str], Any]], dict[str, str | None] | None] = _no_dataset


# STS task formats; plugins add theirs in the entry-point group `viewmill.sts_formats`.
STS_FORMATS: Registry[StsFormat] = Registry(
    "viewmill.sts_formats",
    "STS format",
    {
        "stsb": "viewmill.train.evaluation.sts_formats:STSB",
        "sick": "viewmill.train.evaluation.sts_formats:SICK",
        "sick-all": "viewmill.train.evaluation.sts_formats:SICK_ALL",
        "senteval-sts": "viewmill.train.evaluation.sts_formats:SENTEVAL_STS",
        "sts17": "viewmill.train.evaluation.sts_formats:STS17",
        "stsb-xling": "viewmill.train.evaluation.sts_formats:STSB_XLING",
    },
    entry_type=StsFormat,
)


def read_text(path: Path) -> str:
    if not path.is_file():
        fix = missing_hint(path) or " (fix evaluate.tasks[].path in the recipe)"
        raise EvalDataError(f"evaluation file not found: {path}{fix}")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise EvalDataError(f"{path}: not valid UTF-8 at byte {exc.start}") from None


def load_stsb(path: Path) -> StsData:
    """STS Benchmark csv: tab separated genre, file, year, id, score, s1, s2 (sometimes more columns)."""
    s1, s2, gold = [], [], []
    for line_no, line in enumerate(read_text(path).splitlines(), start=1):
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
    rows = list(csv.DictReader(read_text(path).splitlines(), delimiter="\t", quoting=csv.QUOTE_NONE))
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


def load_sick_all(folder: Path) -> StsData:
    """All of SICK (train + trial + test, 9,927 pairs): the set MTEB's SICK-R scores."""
    names = ("SICK_train.txt", "SICK_trial.txt", "SICK_test_annotated.txt")
    whole = concatenated({name: load_sick(folder / name) for name in names})
    return replace(whole, convention=f"all {len(whole.gold)} pairs of SICK train+trial+test (MTEB's SICK-R)")


def load_sts_subsets(inputs: Path, gold_dir: Path | None = None) -> dict[str, StsData]:
    """STS.input.X.txt (s1 TAB s2) with STS.gs.X.txt (score, blank when unscored) per subset X.

    A gold file without inputs (STS13's SMT, licensed apart) is skipped; inputs without
    a gold file, or files of different lengths, are errors naming the file.
    """
    if not inputs.is_dir():
        fix = missing_hint(inputs) or " (point the task's path at e.g. STS12-en-test)"
        raise EvalDataError(f"STS folder not found: {inputs}{fix}")
    gold_dir = gold_dir or inputs
    subsets: dict[str, StsData] = {}
    for input_file in sorted(inputs.glob("STS.input.*.txt")):
        subset = input_file.name.removeprefix("STS.input.").removesuffix(".txt")
        gold_file = gold_dir / f"STS.gs.{subset}.txt"
        if not gold_file.is_file():
            raise EvalDataError(f"{input_file} has no gold file {gold_file}: copy it beside the inputs")
        pairs, scores = read_text(input_file).splitlines(), read_text(gold_file).splitlines()
        if len(pairs) != len(scores):
            raise EvalDataError(
                f"{gold_file} has {len(scores)} lines but {input_file} has {len(pairs)}: they must line up"
            )
        subsets[subset] = scored_pairs(input_file, gold_file, pairs, scores, subset)
    if not subsets:
        raise EvalDataError(f"{inputs} holds no STS.input.*.txt files")
    return subsets


def scored_pairs(input_file: Path, gold_file: Path, pairs: list[str], scores: list[str], label: str) -> StsData:
    s1, s2, gold, unscored = [], [], [], 0
    for line_no, (pair, score) in enumerate(zip(pairs, scores, strict=True), start=1):
        if not score.strip():
            unscored += 1
            continue
        cols = pair.split("\t")
        if len(cols) < 2:
            raise EvalDataError(f"{input_file}:{line_no}: expected two tab-separated sentences")
        try:
            gold.append(float(score))
        except ValueError:
            raise EvalDataError(f"{gold_file}:{line_no}: score '{score.strip()}' is not a number") from None
        s1.append(cols[0])
        s2.append(cols[1])
    return StsData(s1, s2, np.asarray(gold), f"{len(gold)} scored pairs of {label}", unscored)


def load_task(task: StsTask) -> dict[str, StsData]:
    """The task's data by subset; single-set formats have the one subset "all"."""
    return STS_FORMATS[task.format].load(task)


def concatenated(subsets: dict[str, StsData]) -> StsData:
    """Every subset's pairs as one set: the "all" figure of SimCSE and MTEB."""
    parts = list(subsets.values())
    return StsData(
        [t for p in parts for t in p.s1], [t for p in parts for t in p.s2], np.concatenate([p.gold for p in parts]),
        f"all subsets concatenated ({sum(len(p.gold) for p in parts)} pairs)", sum(p.unscored for p in parts),
    )  # fmt: skip


def score_task(embed: Callable[[list[str]], np.ndarray], task: StsTask) -> list[dict]:
    """Rows (subset, value, n, convention, unscored): each subset, and for multi-subset tasks
    "all" (concatenated) and "mean" (unweighted mean of the subsets, SentEval's figure)."""
    subsets = load_task(task)
    rows = [
        {"subset": name, "value": float("nan") if data.skipped else spearman_x100(embed, data), "n": len(data.gold),
         "convention": f"skipped: {data.skipped}" if data.skipped else data.convention, "unscored": data.unscored}
        for name, data in subsets.items()
    ]  # fmt: skip
    if len(subsets) == 1 and "all" not in subsets:  # a one-file folder: its one set is also the headline
        rows.append({**rows[0], "subset": "all"})
    if len(subsets) > 1:
        whole = concatenated(subsets)
        rows.append({"subset": "all", "value": spearman_x100(embed, whole), "n": len(whole.gold),
                     "convention": whole.convention, "unscored": whole.unscored})  # fmt: skip
        rows.append({"subset": "mean", "value": float(np.mean([r["value"] for r in rows[:-1]])),
                     "n": len(whole.gold), "convention": f"unweighted mean over {len(subsets)} subsets (SentEval)",
                     "unscored": whole.unscored})  # fmt: skip
    return rows


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


def model_spearman_x100(model, data: StsData, batch_size: int = 64, cache: dict | None = None) -> float:
    """Spearman x100 of one SentenceTransformer on one set through sentence-transformers' own
    EmbeddingSimilarityEvaluator (cosine): training's dev score. `spearman_x100` gives the same
    figure (tests/train/test_evaluate.py) and serves the suites and the pooling baselines.
    `cache` (text -> embedding, for this model's current weights) is read and filled, so a text
    shared by several sets is encoded once."""
    evaluator = _cached_evaluator()(
        data.s1, data.s2, data.gold.tolist(), batch_size=batch_size, similarity_fn_names=["cosine"],
        name="sts", write_csv=False, cache={} if cache is None else cache,
    )  # fmt: skip
    metrics = evaluator(model)
    return float(metrics[evaluator.primary_metric] * 100)


def model_scores(
    model, sets: Mapping[str, StsData], batch_size: int = 64, on_set: Callable[[str, int, int], None] | None = None
) -> dict[str, float]:
    """Each set's Spearman x100 (`model_spearman_x100`) in one pass: each distinct text of all the
    sets is encoded once (the cache lives for this pass only: the weights change between passes).
    `on_set(name, i, n)` is told before the i-th of the n sets is scored."""
    cache: dict[str, np.ndarray] = {}
    scores = {}
    for i, (name, data) in enumerate(sets.items(), start=1):
        if on_set is not None:
            on_set(name, i, len(sets))
        scores[name] = model_spearman_x100(model, data, batch_size, cache)
    return scores


@functools.cache
def _cached_evaluator() -> type:
    """EmbeddingSimilarityEvaluator encoding through a text cache (imported on first use: the
    recipe schema loads this module and must not load torch)."""
    from sentence_transformers.sentence_transformer.evaluation import EmbeddingSimilarityEvaluator

    class CachedEvaluator(EmbeddingSimilarityEvaluator):
        def __init__(self, *args, cache: dict[str, np.ndarray], **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.cache = cache

        def embed_inputs(self, model, sentences, **kwargs) -> np.ndarray:
            missing = list(dict.fromkeys(t for t in sentences if t not in self.cache))
            if missing:
                self.cache.update(zip(missing, super().embed_inputs(model, missing, **kwargs), strict=True))
            return np.stack([self.cache[t] for t in sentences])

    return CachedEvaluator


def spearman_x100(embed: Callable[[list[str]], np.ndarray], data: StsData) -> float:
    from scipy.stats import spearmanr  # a second to import: loading a recipe must not pay it

    a, b = embed(data.s1), embed(data.s2)
    cosine = (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return float(spearmanr(cosine, data.gold).statistic * 100)
