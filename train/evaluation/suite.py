"""An evaluation suite: STS and SentEval transfer tasks behind one interface, and the
papers' layout for their results (a Markdown table and a bar chart)."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from pydantic import Discriminator, Tag
from viewmill.storage.ids import fingerprint
from viewmill.train.evaluation.senteval import TransferTask, load_transfer, score_transfer
from viewmill.train.evaluation.sts import StsTask, load_task, score_task


def _kind(value: Any) -> str:
    fmt = value.get("format") if isinstance(value, dict) else getattr(value, "format", None)
    return "transfer" if fmt == "senteval-transfer" else "sts"


EvalTask = Annotated[Annotated[StsTask, Tag("sts")] | Annotated[TransferTask, Tag("transfer")], Discriminator(_kind)]


SUITES = Path(__file__).parent / "suites"  # package data: the suites `viewmill eval --suite NAME` names


def standard_suites() -> dict[str, Path]:
    """The suites shipped with viewmill by name (papers, multilingual) and their files."""
    return {path.stem: path for path in sorted(SUITES.glob("*.yaml"))}


@cache
def code_fingerprint() -> str:
    """Hash of the scoring code (every module of this package): a changed evaluator never reuses an old figure."""
    modules = sorted(Path(__file__).parent.glob("*.py"))
    return fingerprint(*(f"{path.name}\n{path.read_text(encoding='utf-8')}" for path in modules))


def metric_of(task: StsTask | TransferTask) -> str:
    return "accuracy_x100" if isinstance(task, TransferTask) else "spearman_cosine_x100"


def check(task: StsTask | TransferTask) -> None:
    """Read the task's files (raises EvalDataError naming the file) without embedding anything."""
    if isinstance(task, TransferTask):
        load_transfer(task)
    else:
        load_task(task)


def score(embed: Callable[[list[str]], np.ndarray], task: StsTask | TransferTask) -> list[dict]:
    rows = score_transfer(embed, task) if isinstance(task, TransferTask) else score_task(embed, task)
    for row in rows:
        row.setdefault("unscored", 0)
    return rows


def markdown_table(results: list[dict], tasks: list[str]) -> str:
    """Models as rows, tasks as columns and an Avg. column (the papers' layout); each cell
    is a task's headline figure (STS: all subsets concatenated, or one STS 2017 track;
    transfer: accuracy)."""
    by_model: dict[str, dict[str, float]] = {}
    for row in results:
        by_model.setdefault(row["model"], {})[row["task"]] = row["value"]
    lines = ["| model | " + " | ".join(tasks) + " | Avg. |", "|---" * (len(tasks) + 2) + "|"]
    for model, values in by_model.items():
        cells = [values.get(task) for task in tasks]
        # NaN: a task skipped with its reason (e.g. an STS 2017 track whose files do not line up).
        present = [v for v in cells if v is not None and not np.isnan(v)]
        avg = f"{np.mean(present):.2f}" if len(present) == len(tasks) else "n/a"
        lines.append(f"| {model} | " + " | ".join(_cell(v) for v in cells) + f" | {avg} |")
    return "\n".join(lines) + "\n"


def _cell(value: float | None) -> str:
    if value is None:
        return "-"
    return "skipped" if np.isnan(value) else f"{value:.2f}"


def bar_chart(results: list[dict], tasks: list[str], path: Path) -> Path:
    """Grouped bars: one group per task, one bar per model."""
    import matplotlib

    matplotlib.use("Agg")  # no display on servers
    import matplotlib.pyplot as plt

    models = list(dict.fromkeys(row["model"] for row in results))
    values = {(row["model"], row["task"]): row["value"] for row in results}
    width = 0.8 / max(1, len(models))
    figure, axes = plt.subplots(figsize=(max(6.0, 1.2 * len(tasks) * max(1, len(models)) / 2), 4.0))
    positions = np.arange(len(tasks))
    for i, model in enumerate(models):
        heights = [values.get((model, task), np.nan) for task in tasks]
        axes.bar(positions + i * width - 0.4 + width / 2, heights, width, label=model)
    axes.set_xticks(positions, tasks, rotation=30, ha="right")
    axes.set_ylabel("Spearman x100 (STS) / accuracy (transfer)")
    axes.legend(fontsize="small")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path
