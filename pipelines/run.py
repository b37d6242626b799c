"""A recipe run: its stages in order, each through a caller-given wrapper (Prefect tasks, or
plain calls), timed, and recorded in `runs` whether the run succeeds or fails."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from viewmill.augment.models import release_models
from viewmill.augment.views import ShardReport
from viewmill.pipelines.context import RunContext, new_run_id
from viewmill.pipelines.recipe import Recipe
from viewmill.pipelines.run_record import FlowRunInfo, RunSummary, begin_run, end_run
from viewmill.pipelines.stages.augment import ShardJob, augment_finish, augment_plan, run_shards_here, shard_jobs
from viewmill.pipelines.stages.evaluate import EvalTarget, evaluate_stage
from viewmill.pipelines.stages.ingest import ingest_stage
from viewmill.pipelines.stages.pair import existing_snapshot, pair_stage
from viewmill.pipelines.stages.preflight import preflight
from viewmill.pipelines.stages.producers import release_producers
from viewmill.pipelines.stages.soup import soup_stage
from viewmill.pipelines.stages.train import TrainResult, train_stage
from viewmill.storage.snapshots import Snapshot
from viewmill.train.encoder import resolve_encoder
from viewmill.train.export import model_id_of
from viewmill.train.mining import MinedNegatives

from viewmill.memory import release_dropped_models, release_freed_memory

__all__ = ["RunContext", "RunSummary", "new_run_id", "run_recipe"]

log = logging.getLogger(__name__)
Stage = Callable[..., Any]
MapShards = Callable[[list[ShardJob]], list[ShardReport]]


@dataclass
class StageTimer:
    """Calls stages through `call` and adds up each stage's seconds under its name."""

    call: Callable[..., Any]
    timings: dict[str, float] = field(default_factory=dict)

    def __call__(self, name: str, stage: Stage, *args: Any, direct: bool = False) -> Any:
        t0 = time.perf_counter()
        result = stage(*args) if direct else self.call(stage, *args)
        release_freed_memory()  # what this stage freed is not held under the next one
        self.timings[name] = round(self.timings.get(name, 0.0) + time.perf_counter() - t0, 2)
        return result


def run_recipe(
    ctx: RunContext,
    call: Callable[..., Any] = lambda stage, *args: stage(*args),
    map_shards: MapShards = run_shards_here,
    flow: str = "plain",
    preflight_done: bool = False,
    *,
    snapshot: str | None = None,
    train: bool = True,
    evaluate: bool = True,
    prefect: FlowRunInfo | None = None,
) -> dict[str, Any]:
    """Run every stage in order through `call` (Prefect passes one that wraps each stage in a task);
    augmentation shards go through `map_shards` (Prefect submits them to its task runner).

    `preflight_done` skips the input checks when the caller has just run them. With
    `snapshot`, ingest, augment and pair are skipped and training reads that existing
    pairs snapshot; `train=False` stops after pairing, `evaluate=False` after training.

    `prefect` names the flow run (and deployment) the run runs in, for its `runs` row.

    Returns the run summary (RunSummary.as_dict). Once preflight has passed, the run's `runs`
    row is written (`running`) and at the end says `succeeded` or `failed` with the error, a
    corpus error ingest's full read finds included; preflight's refusals write nothing at all.
    """
    started = datetime.now(UTC)
    timed = StageTimer(call)
    summary = RunSummary(ctx.run_id, ctx.recipe.name, timed.timings)
    if not preflight_done:
        timed("preflight", preflight, ctx)
    begin_run(ctx, flow, started, prefect)
    try:
        if snapshot is None:
            summary.snapshot = _make_pairs(ctx, timed, map_shards, summary)
        else:
            summary.snapshot = existing_snapshot(ctx, snapshot)
        if train and ctx.recipe.train is not None:
            _train_and_evaluate(ctx, timed, summary, summary.snapshot, evaluate=evaluate)
    except BaseException as exc:
        try:
            end_run(ctx, "failed", timed.timings, summary.counts(), error=f"{type(exc).__name__}: {exc}")
        except Exception as unrecorded:  # e.g. the same full disk: the run's own error says what failed and where
            log.warning("the failed run %s could not be recorded in `runs`: %s", ctx.run_id, unrecorded)
        raise
    timed.timings["total"] = round((datetime.now(UTC) - started).total_seconds(), 2)
    end_run(ctx, "succeeded", timed.timings, summary.counts())
    return summary.as_dict()


def _make_pairs(ctx: RunContext, timed: StageTimer, map_shards: MapShards, summary: RunSummary) -> Snapshot:
    """Ingest, augment (shards through `map_shards`) and pair; fills the summary as it goes."""
    summary.ingest = timed("ingest", ingest_stage, ctx)
    plan = timed("augment", augment_plan, ctx)
    done = timed("augment", map_shards, shard_jobs(ctx, plan), direct=True)  # submits its own tasks
    summary.augment = {
        a.name: timed("augment", augment_finish, ctx, a.name, [r for r in done if r.augmenter == a.name])
        for a in ctx.recipe.augmenters
    }
    released = release_models()  # translation, MLM and meaning-filter weights are done for this run
    release_producers()  # and so are the producers kept for this process's shards
    configs = {name: report.config_hash for name, report in summary.augment.items()}
    pairings = [(configs[a], configs[b]) for a, b in ctx.recipe.pair.pairs]
    snapshot = timed("pair", pair_stage, ctx, pairings, summary.ingest.corpus_version)
    if released or isinstance(ctx.recipe.pair.negatives, MinedNegatives):  # a miner's encoder is dropped too
        release_dropped_models()
    return snapshot


def _ingredient(ctx: RunContext, call: Callable[..., Any], recipe: Recipe) -> TrainResult:
    """A named recipe's model (a soup's ingredient, or the start a training continues): its run
    in the same state, every stage reused where done before (a run of its own in `runs`), its
    augmenting in this process, not evaluated."""
    child = RunContext(recipe, ctx.state, ctx.settings)
    summary = run_recipe(child, call, evaluate=False)
    trained = summary["train"]
    return TrainResult(trained["model_id"], trained["path"], trained["reused"], trained["selected_step"])


def _train_and_evaluate(
    ctx: RunContext, timed: StageTimer, summary: RunSummary, snap: Snapshot, *, evaluate: bool
) -> None:
    """Train on the snapshot, then evaluate the trained model (and the untrained base when the
    recipe asks for a baseline)."""
    spec = ctx.recipe.train
    assert spec is not None
    evaluates = evaluate and ctx.recipe.evaluate is not None and bool(ctx.recipe.evaluate.tasks)
    models = []
    base = resolve_encoder(spec.encoder)
    start = EvalTarget("untrained", base, model_id_of(base)) if evaluates else None
    if start is not None and ctx.recipe.evaluate.baseline:
        models.append(start)
    named = ctx.recipe.start_recipe()  # the model this training continues, trained first where the lake lacks it
    begun = timed("start_from", _ingredient, ctx, timed.call, named, direct=True) if named is not None else None
    summary.train = timed("train", train_stage, ctx, snap.name, snap.content_hash, begun.path if begun else None)
    trained = summary.train.report
    if trained is not None and trained.first_step_s is not None:  # within train's seconds: its start-up at scale
        timed.timings["train_first_step"] = trained.first_step_s
        if trained.median_step_s is not None:
            timed.timings["train_step"] = trained.median_step_s
    final = summary.train.path, summary.train.model_id
    if ctx.recipe.soup is not None:
        made = [timed("soup_recipes", _ingredient, ctx, timed.call, r, direct=True) for r in ctx.recipe.soup_recipes()]
        ingredients = [summary.train, *made]
        summary.soup = timed("soup", soup_stage, ctx, ingredients)
        final = summary.soup.path, summary.soup.model_id
    models.append(EvalTarget("trained", *final, card=True, start=start))
    if evaluates:
        summary.evals = timed("evaluate", evaluate_stage, ctx, models)
