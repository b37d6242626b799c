"""The evaluate stage: models scored on evaluation tasks, results stored in `evals` and reused
while model, task and data are the same."""

from __future__ import annotations

import functools
import logging
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
from viewmill.pipelines.context import RunContext
from viewmill.pipelines.progress import progress_bar
from viewmill.pipelines.stages.evaluate_dev import reusable_dev_scores
from viewmill.storage.ids import file_hash, fingerprint
from viewmill.storage.lake import Lake
from viewmill.storage.schema import EVALS, EVALS_KEY
from viewmill.train.card import task_dataset
from viewmill.train.encoder import load_sentence_model
from viewmill.train.evaluation import suite
from viewmill.train.evaluation.senteval import TransferTask
from viewmill.train.evaluation.sts import Embedder, StsTask, load_task
from viewmill.train.export import same_weights, write_card

Task = StsTask | TransferTask
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EvalTarget:
    """A model to evaluate: its label in tables, where it loads from and its id in `evals`."""

    label: str
    path: str
    model_id: str
    pooling: str | None = None  # a base model's pooling for a baseline; None: the model's own
    card: bool = False  # the run's own export: its model card gets these results
    start: EvalTarget | None = None  # the model the export started from: its rows when the weights are its own


@dataclass(frozen=True)
class EvalRow:
    """A model's headline ("all") value on one task."""

    model: str  # the target's label
    task: str
    value: float
    n: int
    convention: str
    reused: bool  # read from `evals`, not scored in this run
    same_as: str | None = None  # the label of the model whose scores these are (the same weights)


def task_data_hash(task: Task) -> str:
    """The bytes a task reads, how it reads them and the code that scores them: a stored
    result is reused only when all three are the same."""
    paths = [p for p in (task.path, getattr(task, "gold_path", None)) if p is not None]
    hashes = [_folder_hash(p) if p.is_dir() else file_hash(p) for p in paths]
    settings = task.model_dump(mode="json", exclude={"name", "path", "gold_path"})
    return fingerprint(*hashes, settings, suite.code_fingerprint())


def _folder_hash(folder: Path) -> str:
    """Every file under a task's folder: evaluation data has no fixed suffix (.csv, .neg, .label)."""
    files = sorted(f for f in folder.rglob("*") if f.is_file())
    return fingerprint(*((f.relative_to(folder).as_posix(), file_hash(f)) for f in files))


def evaluate_stage(ctx: RunContext, models: list[EvalTarget]) -> list[EvalRow]:
    """Evaluate each model on the recipe's tasks; stored results are reused. The model card of
    the model the run trained gets every score (`EvalTarget.card`)."""
    spec = ctx.recipe.evaluate
    assert spec is not None
    # Read when a model lacks stored rows only: a second run checks nothing here.
    training_scores = functools.cache(lambda: _training_dev_scores(ctx, models, spec.tasks, spec.batch_size))
    with ctx.lake() as lake:
        rows = evaluate_models(lake, models, spec.tasks, run_id=ctx.run_id, batch_size=spec.batch_size,
                               dev_scores=lambda model_id: training_scores().get(model_id, {}))  # fmt: skip
    for target in models:
        if target.card:
            try:
                write_card(Path(target.path), card_results(spec.tasks, [r for r in rows if r.model == target.label]))
            except OSError as exc:  # the card documents; the scores are stored, so the run stands
                log.warning("the scores could not be written into %s/README.md (%s): they are in the lake's evals",
                            target.path, exc)  # fmt: skip
    return rows


def _training_dev_scores(
    ctx: RunContext, models: list[EvalTarget], tasks: list[Task], batch_size: int
) -> dict[str, dict[str, float]]:
    """{model id: {task: score}}: the dev scores the train stage made of the run's model (its
    exported step) and of its start (step 0) that stand for this stage's own (`evaluate_dev`)."""
    trained = next((target for target in models if target.card), None)
    if ctx.recipe.train is None or trained is None:
        return {}
    start = trained.start if trained.start is not None and trained.start.pooling is None else None
    reused = reusable_dev_scores(ctx.recipe.train, trained.path, start.path if start else None, tasks, batch_size,
                                 task_data_hash)  # fmt: skip
    by_model = {trained.model_id: reused.get("trained", {})}
    if start is not None:
        by_model[start.model_id] = reused.get("start", {})
    return by_model


def card_results(tasks: list[Task], rows: list[EvalRow]) -> list[dict[str, Any]]:
    """A model's headline rows as its card shows them: metric and Hugging Face data set added."""
    by_name = {task.name: task for task in tasks}
    return [{"task": row.task, "metric": suite.metric_of(by_name[row.task]), "value": row.value, "n": row.n,
             "dataset": task_dataset(by_name[row.task]), "same_as": row.same_as} for row in rows]  # fmt: skip


def evaluate_models(
    lake: Lake, models: list[EvalTarget], tasks: list[Task], *, run_id: str, batch_size: int = 64,
    dev_scores: Callable[[str], Mapping[str, float]] | None = None,
) -> list[EvalRow]:  # fmt: skip
    """Score every model on every task (each subset, plus "all" and "mean" where a task has
    subsets), store new rows in `evals`, and return the headline ("all") value per model and task.
    `dev_scores(model id)` ({task: score}): scores training made, stored instead of scoring again."""
    results: list[EvalRow] = []
    data_hashes = {task.name: task_data_hash(task) for task in tasks}
    dev_scores = dev_scores or (lambda model_id: {})
    for target in models:
        start = target.start
        if start is not None and same_weights(Path(target.path), start.path):
            log.info("%s: its weights are %s's (%s), tensor for tensor: %s's scores are reused, not scored again",
                        target.label, start.label, start.path, start.label)  # fmt: skip
            rows = _headline_rows(lake, start, tasks, data_hashes, run_id=run_id, batch_size=batch_size,
                                  dev_scores=dev_scores)  # fmt: skip
            _copy_evals(lake, start, target, tasks, data_hashes, run_id)
            results += [EvalRow(target.label, r.task, r.value, r.n, r.convention, reused=True, same_as=start.label)
                        for r in rows]  # fmt: skip
        else:
            results += _headline_rows(lake, target, tasks, data_hashes, run_id=run_id, batch_size=batch_size,
                                      dev_scores=dev_scores)  # fmt: skip
    return results


def _headline_rows(
    lake: Lake, target: EvalTarget, tasks: list[Task], data_hashes: dict[str, str], *, run_id: str, batch_size: int,
    dev_scores: Callable[[str], Mapping[str, float]],
) -> list[EvalRow]:  # fmt: skip
    """The target's headline row per task: stored ones reused, training's dev scores stored, the
    others scored and stored."""
    done = _stored_results(lake, target.model_id, data_hashes)
    todo = [task for task in tasks if not done[task.name]]
    scores = dev_scores(target.model_id) if todo else {}
    from_dev = [task for task in todo if task.name in scores]
    if from_dev:
        log.info("%s: %s from training's dev scores (the same weights, truncation and batch size; equal to a "
                 "fresh scoring within 1e-4), not scored again",
                 target.label, ", ".join(task.name for task in from_dev))  # fmt: skip
        rows = _dev_rows(target, from_dev, scores, data_hashes, done, run_id)
        _replace_evals(lake, target.model_id, [task.name for task in from_dev], rows)
        todo = [task for task in todo if task not in from_dev]
    if todo:
        new_rows = _score(target, todo, data_hashes, done, run_id=run_id, batch_size=batch_size)
        _replace_evals(lake, target.model_id, [task.name for task in todo], new_rows)
    rows = []
    for task in tasks:
        row = next(r for r in done[task.name] if r["subset"] == "all")
        rows.append(EvalRow(target.label, task.name, row["value"], row["n"], row["convention"],
                            reused=task not in todo))  # fmt: skip
    return rows


def _dev_rows(
    target: EvalTarget, tasks: list[Task], scores: Mapping[str, float], data_hashes: dict[str, str],
    done: dict[str, list[dict[str, Any]]], run_id: str,
) -> list[dict[str, Any]]:  # fmt: skip
    """`evals` rows of one-set tasks from training's dev scores; each also goes to `done`."""
    rows = []
    for task in tasks:
        data = next(iter(load_task(task).values()))
        row = {"task": task.name, "subset": "all", "value": scores[task.name], "n": len(data.gold),
               "convention": data.convention, "data_hash": data_hashes[task.name]}  # fmt: skip
        done[task.name].append(row)
        rows.append({**row, "model": target.model_id, "model_label": target.label, "metric": suite.metric_of(task),
                     "run_id": run_id, "created_at": datetime.now(UTC)})  # fmt: skip
    return rows


def _copy_evals(
    lake: Lake, start: EvalTarget, target: EvalTarget, tasks: list[Task], data_hashes: dict[str, str], run_id: str
) -> None:
    """The start's stored rows, stored for `target` too (its weights are the start's), where it has none
    yet; its label says whose they are, so `evals` answers for the export without scoring it again."""
    own = _stored_results(lake, target.model_id, data_hashes)
    theirs = _stored_results(lake, start.model_id, data_hashes)
    todo = [task for task in tasks if not own[task.name]]
    label = f"{target.label} (weights of {start.label})"
    rows = [{**row, "model": target.model_id, "model_label": label, "metric": suite.metric_of(task), "run_id": run_id,
             "created_at": datetime.now(UTC)} for task in todo for row in theirs[task.name]]  # fmt: skip
    if rows:
        _replace_evals(lake, target.model_id, [task.name for task in todo], rows)


def _stored_results(lake: Lake, model_id: str, data_hashes: dict[str, str]) -> dict[str, list[dict[str, Any]]]:
    """The model's stored rows per task, where they were scored on the same data bytes."""
    stored = lake.arrow(
        "SELECT task, subset, value, n, convention, data_hash FROM evals WHERE model = ?", [model_id]
    ).to_pylist()
    done: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in stored:
        if row["data_hash"] == data_hashes.get(row["task"]):
            done[row["task"]].append(row)
    return done


def _score(
    target: EvalTarget, todo: list[Task], data_hashes: dict[str, str], done: dict[str, list[dict[str, Any]]],
    *, run_id: str, batch_size: int,
) -> list[dict[str, Any]]:  # fmt: skip
    """Score the model on `todo`: its rows go to `done` (per task) and come back as `evals` rows."""
    new_rows = []
    with progress_bar(f"evaluate {target.label}", total=len(todo)) as advance:
        with advance.phase(f"loading model {target.path}"):
            embed = Embedder(load_sentence_model(target.path, pooling=target.pooling), batch_size=batch_size)
        for i, task in enumerate(todo, start=1):
            for row in suite.score(embed, task):
                row = {"task": task.name, **row, "data_hash": data_hashes[task.name]}
                row.pop("unscored")
                done[task.name].append(row)
                new_rows.append({**row, "model": target.model_id, "model_label": target.label,
                                 "metric": suite.metric_of(task), "run_id": run_id,
                                 "created_at": datetime.now(UTC)})  # fmt: skip
            advance(i, len(todo))
    return new_rows


def _replace_evals(lake: Lake, model_id: str, tasks: list[str], rows: list[dict[str, Any]]) -> None:
    """A re-evaluation replaces the model's earlier rows for those tasks (one transaction),
    so `evals` holds one row per (model, task, subset, metric)."""
    with lake.transaction():
        for task in tasks:
            lake.con.execute("DELETE FROM evals WHERE model = ? AND task = ?", [model_id, task])
        lake.append("evals", pa.Table.from_pylist(rows, schema=EVALS), unique_on=EVALS_KEY)
