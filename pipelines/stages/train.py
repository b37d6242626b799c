"""The train stage: a model trained on a pairs snapshot (or reused), recorded in `models`
and published."""

from __future__ import annotations

import contextlib
import itertools
import statistics
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from viewmill.pipelines.context import RunContext
from viewmill.pipelines.progress import PlainProgress, progress_bar
from viewmill.pipelines.recipe import DevTask, TrainSpec
from viewmill.pipelines.stages.evaluate import task_data_hash
from viewmill.pipelines.state import StatePaths
from viewmill.storage.crash_points import crash_point
from viewmill.storage.hex_ids import ids_of
from viewmill.storage.ids import fingerprint
from viewmill.storage.lake import Lake
from viewmill.storage.schema import MODELS
from viewmill.storage.snapshots import read_pairs
from viewmill.train import distributed
from viewmill.train.card import base_license, corpus_datasets
from viewmill.train.dev_scores import DevResult
from viewmill.train.encoder import encoder_fingerprint, resolve_encoder
from viewmill.train.evaluation.sts import EvalDataError, StsData, concatenated, load_task, model_scores
from viewmill.train.export import (
    MANIFEST,
    is_complete_model,
    model_lock,
    read_manifest,
    reusable_export,
)
from viewmill.train.loop import TrainReport, train_model, training_code_fingerprint
from viewmill.train.objectives import OBJECTIVES
from viewmill.train.selection import DevScore

from viewmill.cpu import auto_precision
from viewmill.memory import release_freed_memory


@dataclass(frozen=True)
class TrainResult:
    model_id: str
    path: str  # where the published model lives
    reused: bool  # trained before from the same pairs, config, base model, dev data and code
    selected_step: int | None  # the step whose weights were exported; 0: the starting model
    report: TrainReport | None = None  # None when reused

    def as_dict(self) -> dict[str, Any]:
        """The run summary's flat form: the report's fields when this run trained."""
        done = asdict(self.report) if self.report is not None else {"selected_step": self.selected_step}
        return {"model_id": self.model_id, "path": self.path, "reused": self.reused, **done}


def model_id_for(spec: TrainSpec, content_hash: str, start: str | None = None) -> str:
    """What decides the model: pairs, config (the selection rule included), the model training
    starts from (`start`, a model folder, else the recipe's encoder; by content), every dev task
    (name, weight, settings, the bytes it reads, its scoring code) and training code."""
    base = start or resolve_encoder(spec.encoder)
    config = spec.model_dump(exclude={"encoder", "dev", "start_from"})
    if config["precision"] == "auto":  # what this machine will run: a bf16 model is no fp32 one
        config["precision"] = auto_precision(spec.device)
    dev = [(task.name, task.weight, task_data_hash(task)) for task in spec.dev_tasks]
    return fingerprint(content_hash, config, encoder_fingerprint(base), dev, training_code_fingerprint())


def train_stage(ctx: RunContext, snapshot: str, content_hash: str, start: str | None = None) -> TrainResult:
    """Train on a snapshot, from the model folder `start` where given (the model of the recipe's
    `train.start_from`), else from the recipe's encoder; a model trained before from the same
    pairs, config, start and training code is reused.

    The model is exported to `<dir>.staged`, recorded in `models`, then renamed into place:
    a run killed at any point leaves a model whose lake row exists or a staged export that
    the next run records and publishes, never a model without its lineage. Under torchrun
    rank 0 alone records and publishes.
    """
    spec = ctx.recipe.train
    assert spec is not None
    model_id = model_id_for(spec, content_hash, start)
    out_dir = ctx.state.models / f"{ctx.recipe.name}-{model_id[:12]}"
    staged = out_dir.with_name(out_dir.name + ".staged")
    main = distributed.is_main()
    with model_lock(out_dir) if main else contextlib.nullcontext():
        report = None
        if not is_complete_model(out_dir) and not is_complete_model(staged):
            report = _train(ctx, snapshot, model_id, out_dir, staged, start or resolve_encoder(spec.encoder))
            crash_point("exported")
        if main:
            publish_model(ctx, staged, out_dir, model_id)
    selected = report.selected_step if report is not None else read_manifest(out_dir).get("selected_step")
    return TrainResult(model_id, str(out_dir), reused=report is None, selected_step=selected, report=report)


def _train(ctx: RunContext, snapshot: str, model_id: str, out_dir: Path, staged: Path, base: str) -> TrainReport:
    """Train the recipe's model on the snapshot's pairs from the model folder `base`, exported to `staged`."""
    spec = ctx.recipe.train
    assert spec is not None
    stamps = [time.perf_counter()]
    purpose = f"train on pairs snapshot '{snapshot}'"
    with ctx.lake(read_only=True) as lake:
        table = read_pairs(lake, snapshot, purpose=purpose)  # with its hard negatives, where it has them
        if OBJECTIVES.get(spec.objective).needs_source:
            table = with_sources(lake, table, purpose)
    release_freed_memory()  # the read's sort buffers, before the model loads
    named_base = base if spec.continues_a_model else spec.encoder  # a continued model by its folder
    card = {"recipe": ctx.recipe.name, "snapshot": snapshot, "base_model": named_base, "model_id": model_id,
            "corpus": ctx.recipe.corpus_name, "path": str(out_dir), "license": base_license(base),
            "corpus_datasets": corpus_datasets(ctx.recipe.corpus.format, ctx.recipe.corpus.files),
            "dev_task": ", ".join(task.name for task in spec.dev_tasks) or None}  # fmt: skip
    keys = sentence_keys(table["sentence_id"])
    table = table.drop_columns([name for name in ("pair_id", "sentence_id") if name in table.column_names])
    stamp = lambda _step, _loss: stamps.append(time.perf_counter())  # noqa: E731
    trained_spec = _as_trained(spec)
    with progress_bar(f"train {spec.objective} ({spec.steps} steps)", total=spec.steps, unit="steps") as progress:
        report = train_model(table, base, trained_spec, staged, card=card, keys=keys,
                             dev=dev_scorer(spec.dev_tasks, progress),
                             on_trained=lambda step: progress(step, spec.steps), phase=progress.phase,
                             on_step=stamp)  # fmt: skip
    report.first_step_s, report.median_step_s = step_times(stamps)
    return report


def _as_trained(spec: TrainSpec) -> TrainSpec:
    """The settings a model's manifest records: a `start_from` recipe by its name (the model it
    left is the manifest's base_model), not the whole recipe."""
    named = spec.start_from
    return spec.model_copy(update={"start_from": named["name"]}) if isinstance(named, dict) else spec


def sentence_keys(ids: pa.ChunkedArray) -> np.ndarray | pa.ChunkedArray:
    """The pairs' sentence ids as 64-bit values (a million pairs never make a million Python
    strings, nor a hash table of them); ids that are not the lake's 16 hex digits stay as they are."""
    try:
        return ids_of(ids.combine_chunks())
    except ValueError:
        return ids


def step_times(stamps: list[float]) -> tuple[float | None, float | None]:
    """From the stage's start and each step's end: the start to the first step, and a step's
    median after that (None where there are none)."""
    if len(stamps) < 2:
        return None, None
    steps = [later - earlier for earlier, later in itertools.pairwise(stamps[1:])]
    return round(stamps[1] - stamps[0], 3), round(statistics.median(steps), 4) if steps else None


def with_sources(lake: Lake, pairs: pa.Table, purpose: str) -> pa.Table:
    """`pairs` with `text_source`, the text of each pair's sentence (the lake's `sentences`)."""
    lake.require_intact(("sentences",), purpose)
    with lake.with_keys("_pair_sentences", pairs.select(["sentence_id"])):
        # min: one text per id, whichever corpora ingested the sentence
        found = lake.arrow("SELECT sentence_id, min(text) AS text FROM sentences WHERE sentence_id IN "
                           "(SELECT sentence_id FROM _pair_sentences) GROUP BY sentence_id")  # fmt: skip
    where = pc.index_in(pairs["sentence_id"], value_set=found["sentence_id"])
    if where.null_count:
        missing = pairs["sentence_id"].filter(pc.is_null(where))[0]
        raise ValueError(
            f"{where.null_count} pairs name sentences the lake's sentences table lacks (e.g. {missing}): the lake "
            "is incomplete; run `viewmill lake verify`, or train with an objective that does not read sources"
        )
    return pairs.append_column("text_source", found["text"].take(where))


def publish_model(ctx: RunContext, staged: Path, out_dir: Path, model_id: str) -> None:
    """Record the model's lake row (once), then rename its staged export into place; an export
    whose manifest names another model, or whose files are not those it recorded, is refused."""
    source = out_dir if is_complete_model(out_dir) else staged
    manifest = reusable_export(source, model_id)
    # The path relative to the state directory: a copied or moved state names its own folder.
    row = {"model_id": manifest["model_id"], "path": ctx.state.recorded(out_dir),
           "base_model": manifest.get("base_model"), "objective": manifest["train_config"]["objective"],
           "snapshot": manifest.get("snapshot"),
           "train_config": (source / MANIFEST).read_text(encoding="utf-8"), "run_id": ctx.run_id,
           "created_at": datetime.now(UTC)}  # fmt: skip
    with ctx.lake() as lake, lake.transaction():
        lake.append("models", pa.Table.from_pylist([row], schema=MODELS), unique_on=("model_id",))
    crash_point("recorded")
    if source == staged:
        staged.rename(out_dir)


def trained_models(lake: Lake, state: StatePaths) -> list[dict[str, Any]]:
    """The `models` rows, newest first, each with `folder`: its folder in this state
    (`StatePaths.model_folder`: a copied or moved state's own, however the row was written)."""
    rows = lake.arrow("SELECT model_id, path, objective, snapshot, created_at FROM models ORDER BY created_at DESC")
    return [{**row, "folder": state.model_folder(row["path"])} for row in rows.to_pylist()]


def dev_scorer(tasks: list[DevTask], progress: PlainProgress | None = None) -> DevScore | None:
    """Each dev task's score (sentence-transformers' own evaluator; a text shared by several
    tasks encoded once per evaluation) and their weighted mean, the selection score. `progress`
    says which task it scores, outside its rate of training steps."""
    if not tasks:
        return None
    sets = {task.name: _dev_data(task) for task in tasks}
    weights = {task.name: task.weight for task in tasks}

    def score(model) -> DevResult:
        if progress is None:
            return DevResult.of(model_scores(model, sets), weights)
        with progress.phase("scoring dev"):
            say = lambda name, i, n: progress.doing(f"scoring dev: {name} {i}/{n}")  # noqa: E731
            result = DevResult.of(model_scores(model, sets, on_set=say), weights)
        scores = ", ".join(f"{name} {value:.2f}" for name, value in result.scores.items())
        progress.note(f"dev at step {progress.done}: {scores} (mean {result.score:.2f})")
        return result

    return score


def _dev_data(task: DevTask) -> StsData:
    subsets = load_task(task)
    skipped = [data.skipped for data in subsets.values() if data.skipped]
    if skipped:
        raise EvalDataError(f"dev task {task.name} cannot be scored: {skipped[0]}; choose another dev task")
    return concatenated(subsets)
