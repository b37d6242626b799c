"""viewmill's own STS formats, the entries of `sts.STS_FORMATS`: each one's loader, the
settings it reads and checks, and the Hugging Face data set its files are (for model cards)."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from viewmill.storage.datasets.fetching import missing_hint
from viewmill.train.evaluation.sts import (
    EvalDataError,
    StsData,
    StsFormat,
    StsTask,
    load_sick,
    load_sick_all,
    load_sts_subsets,
    load_stsb,
    read_text,
    scored_pairs,
)

# SemEval-2017 Task 1 tracks by language pair (es-en is track 4a, SNLI-derived, as in
# SentEval and MTEB; track 4b is the WMT subset).
STS17_TRACKS = {
    "ar-ar": "track1.ar-ar", "ar-en": "track2.ar-en", "es-es": "track3.es-es", "es-en": "track4a.es-en",
    "es-en-wmt": "track4b.es-en", "en-en": "track5.en-en", "tr-en": "track6.tr-en",
}  # fmt: skip


Dataset = dict[str, str | None]  # {"id", "config", "split"} on the Hugging Face hub
Settings = Callable[[str], Any]  # a task's setting by name, from the task or its JSON form

# Evaluation files and folders whose Hugging Face data set is known: name -> (hub id, split).
STS_FILES = {
    "sts-train.csv": ("mteb/stsbenchmark-sts", "train"),
    "sts-dev.csv": ("mteb/stsbenchmark-sts", "validation"),
    "sts-test.csv": ("mteb/stsbenchmark-sts", "test"),
    **{f"STS{year}-en-test": (f"mteb/sts{year}-sts", "test") for year in range(12, 17)},
}


SICK_R: Dataset = {"id": "mteb/sickr-sts", "config": None, "split": "test"}  # MTEB's: all 9,927 pairs, as sick-all


def single_set(loader: Callable[[Path], StsData]) -> Callable[[StsTask], dict[str, StsData]]:
    """A format of one set read from the task's path: its one subset, "all"."""
    return lambda task: {"all": loader(task.path)}


def known_files(get: Settings) -> Dataset | None:
    """STS-B's files and STS12-16's folders, by name."""
    name = Path(str(get("path") or "")).name
    if name not in STS_FILES:
        return None
    hub, split = STS_FILES[name]
    return {"id": hub, "config": None, "split": split}


def load_sts17_track(task: StsTask) -> StsData:
    """One STS 2017 track. Input and gold files of different lengths skip the track (with the
    reason), or with gold_alignment first-lines score the first len(gold) input lines."""
    assert task.track is not None
    name = STS17_TRACKS[task.track]
    if not task.path.is_dir():
        raise EvalDataError(f"STS 2017 folder not found: {task.path}{missing_hint(task.path)}")
    input_file = task.path / f"STS.input.{name}.txt"
    gold_file = (task.gold_path or task.path) / f"STS.gs.{name}.txt"
    pairs, scores = read_text(input_file).splitlines(), read_text(gold_file).splitlines()
    label = f"STS 2017 {name}"
    if len(pairs) != len(scores):
        if task.gold_alignment == "strict" or len(pairs) < len(scores):
            return StsData([], [], np.zeros(0), f"skipped: {label}", skipped=(
                f"{input_file.name} has {len(pairs)} lines but {gold_file.name} {len(scores)}: track skipped "
                "(gold_alignment: first-lines scores the first input lines, as SentEval does)"
            ))  # fmt: skip
        pairs = pairs[: len(scores)]
        label += f" (first {len(scores)} input lines, gold_alignment first-lines)"
    return scored_pairs(input_file, gold_file, pairs, scores, label)


def _stsb_multi_mt_rows(path: Path) -> tuple[list[tuple[str, str]], list[float]]:
    """One stsb-multi-mt file: sentence1, sentence2, score per row (csv, quoted where needed)."""
    pairs, gold = [], []
    for row_no, row in enumerate(csv.reader(io.StringIO(read_text(path), newline="")), start=1):
        if len(row) != 3:
            raise EvalDataError(f"{path}: row {row_no} has {len(row)} columns, expected sentence1, sentence2, score")
        try:
            gold.append(float(row[2]))
        except ValueError:
            raise EvalDataError(f"{path}: row {row_no}: score '{row[2]}' is not a number") from None
        pairs.append((row[0], row[1]))
    return pairs, gold


def load_stsb_multi_mt(folder: Path, lang_a: str, lang_b: str, split: str) -> StsData:
    """First sentences in `lang_a` with second sentences in `lang_b`: stsb-multi-mt's files are
    one set translated, row by row, so two languages' files must agree on row count and scores."""
    path_a, path_b = (folder / f"stsb-{lang}-{split}.csv" for lang in (lang_a, lang_b))
    pairs_a, gold = _stsb_multi_mt_rows(path_a)
    pairs_b, gold_b = _stsb_multi_mt_rows(path_b) if lang_b != lang_a else (pairs_a, gold)
    if len(pairs_a) != len(pairs_b):
        raise EvalDataError(
            f"{path_b.name} has {len(pairs_b)} rows, {path_a.name} {len(pairs_a)}: stsb-multi-mt files line up "
            "row by row (fetch them again: viewmill data fetch stsb-multi-mt)"
        )
    differ = next((i for i, (a, b) in enumerate(zip(gold, gold_b, strict=True)) if a != b), None)
    if differ is not None:
        raise EvalDataError(
            f"{path_b.name} row {differ + 1} has score {gold_b[differ]}, {path_a.name} {gold[differ]}: the files do "
            "not line up (stsb-multi-mt's translations share each row's score; fetch them again)"
        )
    kind = "one language" if lang_a == lang_b else "cross-lingual"
    return StsData(
        [a for a, _ in pairs_a], [b for _, b in pairs_b], np.asarray(gold),
        f"all {len(gold)} pairs of STS-B {split}, s1 {lang_a}, s2 {lang_b} ({kind}, stsb-multi-mt)",
    )  # fmt: skip


def load_sts17(task: StsTask) -> dict[str, StsData]:
    return {"all": load_sts17_track(task)}


def check_sts17(task: StsTask) -> None:
    if task.track not in STS17_TRACKS:
        raise ValueError(
            f"sts17 is scored per track: set track to one of {', '.join(STS17_TRACKS)} (one task per track; "
            "the concatenation of all tracks is not a meaningful score)"
        )


def load_stsb_xling(task: StsTask) -> dict[str, StsData]:
    if not task.path.is_dir():
        raise EvalDataError(f"stsb-multi-mt folder not found: {task.path}{missing_hint(task.path)}")
    assert task.lang_a is not None and task.lang_b is not None and task.split is not None  # check_stsb_xling
    return {"all": load_stsb_multi_mt(task.path, task.lang_a, task.lang_b, task.split)}


def check_stsb_xling(task: StsTask) -> None:
    if task.lang_b is None:
        raise ValueError("stsb-xling needs lang_b, the second sentences' language (e.g. de; lang_a: en by default)")
    task.split, task.lang_a = task.split or "test", task.lang_a or "en"


def stsb_multi_mt_dataset(get: Settings) -> Dataset:
    # The hub set has one config per language; English s1 with s2 in lang_b reads that config's s2.
    lang_a, lang_b = get("lang_a"), get("lang_b")
    config = lang_b if lang_a in (None, "en", lang_b) else f"{lang_a}-{lang_b}"
    return {"id": "PhilipMay/stsb_multi_mt", "config": config, "split": get("split")}


STSB = StsFormat(single_set(load_stsb), dataset=known_files)
SICK = StsFormat(single_set(load_sick))
SICK_ALL = StsFormat(single_set(load_sick_all), dataset=lambda get: dict(SICK_R))
SENTEVAL_STS = StsFormat(lambda task: load_sts_subsets(task.path, task.gold_path), dataset=known_files)
STS17 = StsFormat(
    load_sts17, settings=("track", "gold_alignment"), check=check_sts17,
    dataset=lambda get: {"id": "mteb/sts17-crosslingual-sts", "config": get("track"), "split": "test"},
)  # fmt: skip
STSB_XLING = StsFormat(
    load_stsb_xling, settings=("split", "lang_a", "lang_b"), check=check_stsb_xling, dataset=stsb_multi_mt_dataset
)
