"""SentEval transfer tasks on frozen embeddings with logistic regression (scikit-learn).

As SentEval does: MR, CR, SUBJ and MPQA by 10-fold cross-validation (the regularisation
chosen by an inner cross-validation on each training fold, 5-fold by default); SST2 on its given train/dev/
test split (chosen on dev); TREC and MRPC on their given train/test split (chosen by
cross-validation on train). MRPC's features are |u - v| and u * v. Files are read as
Latin-1, like SentEval, since several of them are not UTF-8.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field
from viewmill.storage.datasets.fetching import missing_hint
from viewmill.train.evaluation.sts import EvalDataError

from viewmill.specs import Seed, Spec

C_GRID = [2.0**t for t in range(-2, 4)]  # SentEval's grid for its scikit-learn classifier
CV_FILES = {
    "MR": ("rt-polarity.pos", "rt-polarity.neg"),
    "CR": ("custrev.pos", "custrev.neg"),
    "SUBJ": ("subj.subjective", "subj.objective"),
    "MPQA": ("mpqa.pos", "mpqa.neg"),
}


class TransferTask(Spec):
    """A SentEval transfer task; `path` is its folder in SentEval's layout (e.g. .../downstream/MR)."""

    name: str
    format: Literal["senteval-transfer"] = "senteval-transfer"
    task: Literal["MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC"]
    path: Path
    folds: int = Field(10, ge=2, le=100)
    inner_folds: int = Field(5, ge=2, le=100)  # choosing C inside each training fold; 10 would double the cost
    seed: Seed = 1111


@dataclass
class Split:
    texts: list[str] | list[tuple[str, str]]
    labels: np.ndarray


def _lines(path: Path, keep_blank: bool = False) -> list[str]:
    if not path.is_file():
        fix = missing_hint(path) or " (point the task's path at the task's folder)"
        raise EvalDataError(f"SentEval file not found: {path}{fix}")
    lines = [line.strip() for line in path.read_bytes().decode("latin-1").splitlines()]
    return lines if keep_blank else [line for line in lines if line]


def load_transfer(task: TransferTask) -> dict[str, Split]:
    """{"all"} for cross-validated tasks, {"train", "test"} (and "dev") for split ones."""
    folder = task.path
    if task.task in CV_FILES:
        # Blank lines count as (empty) sentences, as in SentEval: CR has 3,775 and MPQA 10,606.
        positive, negative = (_lines(folder / name, keep_blank=True) for name in CV_FILES[task.task])
        return {"all": Split(positive + negative, np.array([1] * len(positive) + [0] * len(negative)))}
    if task.task == "SST2":
        splits = {}
        for split in ("train", "dev", "test"):
            rows = [line.rsplit("\t", 1) for line in _lines(folder / "binary" / f"sentiment-{split}")]
            if any(len(r) != 2 for r in rows):
                raise EvalDataError(f"{folder / 'binary' / f'sentiment-{split}'}: expected 'sentence TAB label' lines")
            splits[split] = Split([r[0] for r in rows], np.array([int(r[1]) for r in rows]))
        return splits
    if task.task == "TREC":

        def read(name: str) -> Split:
            rows = [line.split(" ", 1) for line in _lines(folder / name)]
            return Split([r[1] for r in rows], np.array([r[0].split(":")[0] for r in rows]))

        return {"train": read("train_5500.label"), "test": read("TREC_10.label")}

    def read_mrpc(name: str) -> Split:
        rows = [line.split("\t") for line in _lines(folder / name)[1:]]  # a header row first
        if any(len(r) < 5 for r in rows):
            raise EvalDataError(f"{folder / name}: expected 5 tab-separated columns")
        return Split([(r[3], r[4]) for r in rows], np.array([int(r[0].lstrip("\ufeff")) for r in rows]))

    return {"train": read_mrpc("msr_paraphrase_train.txt"), "test": read_mrpc("msr_paraphrase_test.txt")}


def _features(embed: Callable[[list[str]], np.ndarray], split: Split) -> np.ndarray:
    if split.texts and isinstance(split.texts[0], tuple):
        u, v = embed([a for a, _ in split.texts]), embed([b for _, b in split.texts])
        return np.hstack([np.abs(u - v), u * v])
    return embed(list(split.texts))


def _classifier(x: np.ndarray, y: np.ndarray, folds: int, seed: int):
    from sklearn.linear_model import LogisticRegressionCV
    from sklearn.model_selection import StratifiedKFold

    cv = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    with warnings.catch_warnings():  # scikit-learn 1.9 announces a change of fitted attributes we do not read
        warnings.simplefilter("ignore", FutureWarning)
        return LogisticRegressionCV(Cs=C_GRID, cv=cv, max_iter=2000).fit(x, y)


def score_transfer(embed: Callable[[list[str]], np.ndarray], task: TransferTask) -> list[dict]:
    """Rows (subset, value = accuracy x100, n, convention); MRPC adds F1 as subset "f1"."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import f1_score
    from sklearn.model_selection import StratifiedKFold

    data = load_transfer(task)
    if "all" in data:  # 10-fold cross-validation, C chosen inside each training fold
        x, y = _features(embed, data["all"]), data["all"].labels
        outer = StratifiedKFold(n_splits=task.folds, shuffle=True, random_state=task.seed)
        correct = 0
        for train, test in outer.split(x, y):
            model = _classifier(x[train], y[train], task.inner_folds, task.seed)
            correct += int((model.predict(x[test]) == y[test]).sum())
        convention = f"{task.folds}-fold cross-validation, C from an inner {task.inner_folds}-fold CV"
        return [{"subset": "all", "value": 100 * correct / len(y), "n": len(y), "convention": convention}]
    train, test = data["train"], data["test"]
    x_train, x_test = _features(embed, train), _features(embed, test)
    if "dev" in data:  # SST2: C chosen on the given dev split
        x_dev = _features(embed, data["dev"])
        best = max(C_GRID, key=lambda c: LogisticRegression(C=c, max_iter=2000).fit(x_train, train.labels)
                   .score(x_dev, data["dev"].labels))  # fmt: skip
        model = LogisticRegression(C=best, max_iter=2000).fit(x_train, train.labels)
        convention = "given train/dev/test split, C chosen on dev"
    else:
        model = _classifier(x_train, train.labels, task.inner_folds, task.seed)
        convention = f"given train/test split, C chosen by {task.inner_folds}-fold CV on train"
    predicted = model.predict(x_test)
    rows = [{"subset": "all", "value": 100 * float((predicted == test.labels).mean()), "n": len(test.labels),
             "convention": convention}]  # fmt: skip
    if task.task == "MRPC":
        f1 = 100 * f1_score(test.labels, predicted)
        rows.append({"subset": "f1", "value": float(f1), "n": len(test.labels), "convention": convention + ", F1"})
    return rows
