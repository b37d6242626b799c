"""Prefect flows: thin wrappers that run the plain stages as tasks.

A flow called by the command line gets the recipe it validated (`recipe`, JSON from
`recipe_parameter`) and its run id (`run_id`): one parse and one run id per run, the recipe
file not read again. A deployment's run has no such caller and passes only `recipe_path`,
parsed once in the flow; its run id is made from its flow run (`flow_run_id_of`). Flow runs
are named after the recipe and the run id (`tiny-20261126T233000-1a2b3c`), and the run's
`runs` row names its flow run and deployment.

Import this only after `configure_prefect` has set Prefect's environment.
"""

from __future__ import annotations

import contextlib
import dataclasses
from datetime import UTC
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import INPUTS, NO_CACHE, TASK_SOURCE
from prefect.context import FlowRunContext
from prefect.filesystems import RemoteFileSystem, WritableFileSystem
from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner
from prefect.tasks import exponential_backoff
from viewmill.augment.cache import CacheStats
from viewmill.augment.commit_sizes import on_gpu
from viewmill.augment.views import ShardReport, model_devices
from viewmill.pipelines.context import RunContext
from viewmill.pipelines.orchestration import artifacts
from viewmill.pipelines.recipe import Recipe, RecipeError, load_recipe, read_recipe_file
from viewmill.pipelines.run import run_recipe
from viewmill.pipelines.run_record import FlowRunInfo
from viewmill.pipelines.stages.augment import (
    ShardJob,
    augment_finish,
    augment_plan,
    augment_shard,
    shards_missing_views,
)
from viewmill.pipelines.stages.evaluate import evaluate_stage
from viewmill.pipelines.stages.ingest import ingest_stage
from viewmill.pipelines.stages.pair import pair_stage
from viewmill.pipelines.stages.preflight import preflight
from viewmill.pipelines.stages.shard_lakes import keeping_lakes
from viewmill.pipelines.stages.soup import soup_stage
from viewmill.pipelines.stages.train import train_stage
from viewmill.pipelines.state import StatePaths
from viewmill.pipelines.sweep import SweepRecipes, run_sweep

from viewmill.settings import Settings

# Stages cache through the lake themselves (translations, views, models, evals), so
# Prefect's own caching stays off for them and tasks never hash lake connections.
_STAGES = (preflight, ingest_stage, augment_plan, augment_finish, pair_stage, train_stage, soup_stage, evaluate_stage)
# Stages that hold a model on the accelerator carry the `gpu` tag: a concurrency limit of 1
# on that tag (viewmill serve, viewmill deploy, prefect.yaml's build step set it: deploy.py) keeps one
# GPU from running two of them at once.
DASK_ENV = "VIEWMILL_DASK"
MODEL_STAGES = {train_stage, soup_stage, evaluate_stage}
TASKS = {
    fn: task(
        fn,
        name=fn.__name__.removesuffix("_stage").replace("_", "-"),
        cache_policy=NO_CACHE,
        tags=["gpu"] if fn in MODEL_STAGES else None,
    )
    for fn in _STAGES
}


# A shard is the unit of retry and of scale-out: its task retries with exponential backoff,
# and its result is cached across runs by what decides it (augmenter configuration, corpus
# and lake identity, shard; not the run id) plus the task's source.
SHARD_CACHE = (INPUTS - "run_id" - "settings") + TASK_SOURCE
augment_shard_task = task(augment_shard, name="augment-shard", cache_policy=SHARD_CACHE, persist_result=True)


def result_storage(ctx: RunContext) -> Path | WritableFileSystem:
    """Where shard results persist: the settings' `results` (VIEWMILL_RESULTS: a folder every
    worker mounts, or a URL such as s3://bucket/viewmill-results, kept as a `viewmill-results`
    block on the server), else the state directory."""
    where = ctx.settings.results or str(ctx.state.root / "results")
    if "://" not in where:
        return Path(where)
    block = RemoteFileSystem(basepath=where)
    block.save("viewmill-results", overwrite=True)  # tasks must name a block the server knows
    return block


def submit_shards(ctx: RunContext, jobs: list[ShardJob]) -> list[ShardReport]:
    """Submit every shard to the Dask cluster the settings name, else to the flow's task
    runner (one at a time in this process), and wait.
    A cached shard did no work in this run: it reports its views as reused."""
    execution = ctx.recipe.execution
    shard_task = augment_shard_task.with_options(
        retries=execution.retries,
        retry_delay_seconds=exponential_backoff(backoff_factor=execution.retry_delay_s) if execution.retries else 0,
        retry_jitter_factor=0.5,
        result_storage=result_storage(ctx),
    )
    # A shard that holds a model on the accelerator (its engine or its meaning filter) takes the
    # `gpu` slot like training does.
    gpu = [on_gpu(*model_devices(job.spec, job.filters)) for job in jobs]
    # A cached result is trusted only while the lake still holds the shard's views.
    stale = shards_missing_views(str(ctx.state.lake), jobs, ctx.settings)
    tasks = [
        shard_task.with_options(tags=["gpu"] if gpu else None, refresh_cache=missing)
        for gpu, missing in zip(gpu, stale, strict=True)
    ]
    with contextlib.ExitStack() as stack:
        # The run's settings choose where shards go, when the run starts (not at import).
        runner = stack.enter_context(task_runner(ctx.settings.dask)) if ctx.settings.dask else None
        if runner is None:  # the shards run in this process: each lent the lake the last one used
            stack.enter_context(keeping_lakes())
        futures: list[Any] = []
        by_shard: dict[tuple[str, int], Any] = {}
        for shard, job in zip(tasks, jobs, strict=True):
            # With the meaning filter a shard judges against the earlier augmenters' views of the
            # same sentences: it waits for them rather than making them too on another worker.
            after = [by_shard[(job.earlier[-1].name, job.shard.index)]] if job.earlier else None
            kwargs = job.kwargs()
            future = (
                shard.submit(**kwargs, wait_for=after)
                if runner is None
                else runner.submit(shard, parameters=kwargs, wait_for=after)
            )
            futures.append(future)
            by_shard[(job.spec.name, job.shard.index)] = future
        return [_shard_report(future) for future in futures]  # read before a cluster closes


def _shard_report(future: Any) -> ShardReport:
    report = future.result()
    if future.state.is_completed() and future.state.name == "Cached":
        report = dataclasses.replace(report, reused_views=report.sentences, new_views=0, cache=CacheStats())
    return report


def task_runner(address: str | None = None) -> TaskRunner:
    """Where shard tasks run: a Dask cluster when `address` names one (`tcp://scheduler:8786`,
    or `local:N` for a local cluster of N worker processes), else one at a time in the flow's
    process (models on one box are not loaded twice)."""
    if not address:
        return ThreadPoolTaskRunner(max_workers=1)
    from prefect_dask import DaskTaskRunner

    if address.startswith("local:"):
        workers = address.removeprefix("local:")
        if not workers.isdigit() or int(workers) < 1:
            raise RecipeError(f"--dask / {DASK_ENV} {address!r}: write local:N with N workers, e.g. local:2")
        import dask

        # Dask would set these in this process's environment before spawning its workers,
        # and the flow trains here: give them to the workers only.
        dask.config.set({"distributed.nanny.pre-spawn-environ": {}})
        single_threaded = {name: "1" for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
        return DaskTaskRunner(
            cluster_kwargs={
                "n_workers": int(workers), "threads_per_worker": 1, "processes": True, "env": single_threaded,
            }
        )  # fmt: skip
    return DaskTaskRunner(address=address)


def run_as_tasks(ctx: RunContext, flow_name: str, **options: Any) -> dict[str, Any]:
    """The recipe's stages as tasks of the current flow, each result logged, and its artifacts."""
    summary = run_recipe(
        ctx,
        call=_logged_stage,
        map_shards=lambda jobs: submit_shards(ctx, jobs),
        flow=f"prefect:{flow_name}",
        prefect=flow_run_info(),
        **options,
    )
    publish(ctx, summary)
    return summary


def _logged_stage(stage: Any, *args: Any) -> Any:
    # Prefect's own lines say only that a task finished: the run's log says what it made.
    result = TASKS[stage](*args)
    line = artifacts.describe_stage(result)
    if line:
        get_run_logger().info(line)
    return result


def flow_run_info() -> FlowRunInfo:
    """The current flow run's id, and its deployment's id and `flow/deployment` name when it has one."""
    from prefect.runtime import deployment

    context = FlowRunContext.get()
    assert context is not None and context.flow_run is not None, "called outside a flow run"
    run = context.flow_run
    if run.deployment_id is None:
        return FlowRunInfo(str(run.id))
    return FlowRunInfo(str(run.id), str(run.deployment_id), f"{context.flow.name}/{deployment.name}")


def flow_run_id_of() -> str:
    """The run id of a deployment's run, which no caller gives one: made from the flow run's
    expected start and id (new_run_id's form), so the flow run's name and its `runs` row agree."""
    context = FlowRunContext.get()
    assert context is not None and context.flow_run is not None, "called outside a flow run"
    run = context.flow_run
    return f"{run.expected_start_time.astimezone(UTC):%Y%m%dT%H%M%S}-{run.id.hex[:6]}"


def _recipe_name(parameters: dict[str, Any]) -> str:
    if parameters.get("recipe"):
        return parameters["recipe"]["name"]
    if parameters.get("recipes"):
        return parameters["recipes"][0]["name"]
    try:  # a deployment's run: the file's name, else its stem (the flow itself then says what is wrong)
        return str(read_recipe_file(parameters["recipe_path"])["name"])
    except (RecipeError, KeyError):
        return Path(parameters["recipe_path"]).stem


def run_name() -> str:
    """A recipe flow run's name: the recipe and the viewmill run id, e.g. `tiny-20261126T233000-1a2b3c`."""
    parameters = FlowRunContext.get().parameters
    return f"{_recipe_name(parameters)}-{parameters.get('run_id') or flow_run_id_of()}"


def sweep_run_name() -> str:
    """A sweep flow run's name: `sweep-<recipe>-<sweep run>`, as its report files are named."""
    return f"sweep-{_recipe_name(FlowRunContext.get().parameters)}-{flow_run_id_of()}"


def flow_context(
    recipe_path: str,
    state_dir: str,
    overrides: list[str] | None,
    settings: Settings | None,
    recipe: dict[str, Any] | None = None,
    run_id: str | None = None,
) -> RunContext:
    """The run's context: the caller's recipe and run id when it gave them, else the recipe
    file parsed here (a deployment's run) and a new run id."""
    parsed = load_recipe(recipe_path, overrides) if recipe is None else Recipe.model_validate(recipe)
    ctx = RunContext.of(parsed, state_dir, settings, run_id or flow_run_id_of())
    get_run_logger().info(
        f"run {ctx.run_id}: recipe {recipe_path}, state {ctx.state.root}, working directory {Path.cwd()}"
    )
    return ctx


def publish(ctx: RunContext, summary: dict[str, Any]) -> None:
    """Artifacts for the UI (the run's own views, a sample of them, training, evaluation), and
    an event when augmentation made a new pairs snapshot."""
    from prefect.artifacts import create_markdown_artifact, create_table_artifact
    from prefect.events import emit_event

    key = ctx.recipe.name.lower().replace("_", "-").replace(".", "-")
    snapshot = summary.get("snapshot")
    if "augment" in summary:
        configs = {name: report["config_hash"] for name, report in summary["augment"].items()}
        version = summary["ingest"]["corpus_version"]
        with ctx.lake(read_only=True) as lake:
            counts = artifacts.run_view_counts(lake, ctx.run_id, version, configs)
            sample = artifacts.round_trip_sample(lake, version, configs)
        create_table_artifact(counts, key=f"{key}-views", description=f"run {ctx.run_id}: views per augmenter, "
                              "status and reason (written_by_run: new in this run)")  # fmt: skip
        create_markdown_artifact(sample, key=f"{key}-round-trips", description=f"run {ctx.run_id}: a sample of views")
    elif snapshot:
        get_run_logger().info(f"pairs snapshot {snapshot['name']}: {snapshot['n_pairs']} pairs, made earlier")
    if summary.get("train"):
        create_markdown_artifact(artifacts.training_markdown(summary["train"], snapshot), key=f"{key}-training",
                                 description=f"run {ctx.run_id}: the trained model")  # fmt: skip
    if summary.get("soup"):
        create_markdown_artifact(artifacts.soup_markdown(summary["soup"]), key=f"{key}-soup",
                                 description=f"run {ctx.run_id}: the model soup")  # fmt: skip
    if summary.get("evals"):
        create_table_artifact(artifacts.eval_table(summary["evals"]), key=f"{key}-evals",
                              description=f"run {ctx.run_id}: evaluation")  # fmt: skip
    if snapshot and snapshot.get("created"):
        emit_event(**artifacts.snapshot_event(ctx.recipe.name, snapshot))
    get_run_logger().info(f"run {ctx.run_id} finished in {summary['timings'].get('total', 0):g} s")


@flow(name="viewmill-recipe", task_runner=task_runner(), flow_run_name=run_name)
def recipe_flow(
    recipe_path: str,
    state_dir: str,
    preflight_done: bool = False,
    overrides: list[str] | None = None,
    settings: Settings | None = None,
    recipe: dict[str, Any] | None = None,
    run_id: str | None = None,
) -> dict[str, Any]:
    """Run a recipe end to end: preflight, ingest, augment, pair, train, evaluate. With `recipe`
    (the caller's validated recipe, overrides applied: `recipe_parameter`) the file is not read;
    with `run_id` the run keeps the caller's id."""
    ctx = flow_context(recipe_path, state_dir, overrides, settings, recipe, run_id)
    return run_as_tasks(ctx, "viewmill-recipe", preflight_done=preflight_done)


@flow(name="viewmill-train", task_runner=task_runner(), flow_run_name=run_name)
def train_flow(
    recipe_path: str,
    state_dir: str,
    snapshot: str | None = None,
    preflight_done: bool = False,
    overrides: list[str] | None = None,
    settings: Settings | None = None,
    recipe: dict[str, Any] | None = None,
    run_id: str | None = None,
) -> dict[str, Any]:
    """Train a recipe's encoder: on an existing pairs snapshot, or on the pairs the recipe
    makes (ingest, augment and pair reuse what the lake already has). No evaluation.
    `recipe` and `run_id` as for recipe_flow."""
    ctx = flow_context(recipe_path, state_dir, overrides, settings, recipe, run_id)
    return run_as_tasks(ctx, "viewmill-train", preflight_done=preflight_done, snapshot=snapshot, evaluate=False)


@flow(name="viewmill-augment", task_runner=task_runner(), flow_run_name=run_name)
def augment_flow(
    recipe_path: str, state_dir: str, overrides: list[str] | None = None, settings: Settings | None = None
) -> dict[str, Any]:
    """Ingest, augment and pair (no training): the nightly job. A new pairs snapshot emits
    `viewmill.snapshot.created`, which the training deployment's trigger listens for."""
    ctx = flow_context(recipe_path, state_dir, overrides, settings)
    return run_as_tasks(ctx, "viewmill-augment", train=False, evaluate=False)


@flow(name="viewmill-sweep", task_runner=task_runner(), flow_run_name=sweep_run_name)
def sweep_flow(
    recipe_path: str,
    state_dir: str,
    overrides: list[str] | None = None,
    settings: Settings | None = None,
    recipes: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Every configuration of the recipe's sweep over the same pairs, each stage a task; ends
    with the comparison table (an artifact, and Markdown and PNG under the state's reports).
    With `recipes` (the caller's `load_sweep`, as `SweepRecipes.as_parameter`) the recipe file is not read."""
    from prefect.artifacts import create_markdown_artifact

    state = StatePaths.resolve(state_dir)
    run = lambda ctx: run_as_tasks(ctx, "viewmill-sweep")  # noqa: E731
    given = recipe_path if recipes is None else SweepRecipes.from_parameter(recipes)
    report = run_sweep(given, state, overrides, run=run, settings=settings or Settings(), sweep_run=flow_run_id_of())
    key = report.sweep.lower().replace("_", "-").replace(".", "-")
    create_markdown_artifact(report.markdown, key=f"{key}-sweep", description=f"sweep {report.sweep_run}")
    return report.as_dict()
