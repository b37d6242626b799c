"""Prefect flows: thin wrappers that run the plain stages as tasks.

Import this only after `configure_prefect` has set Prefect's environment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from pipelines import artifacts, stages
from pipelines.recipe import load_recipe
from pipelines.state import StatePaths

# Stages cache through the lake themselves (translations, views, models, evals), so
# Prefect's own caching stays off and tasks never hash lake connections.
_STAGES = (
    stages.preflight,
    stages.ingest_stage,
    stages.augment_stage,
    stages.pair_stage,
    stages.train_stage,
    stages.evaluate_stage,
)
# Stages that hold a model on the accelerator carry the `gpu` tag: a concurrency limit of
# 1 on that tag (viewmill serve sets it) keeps one GPU from running two of them at once.
MODEL_STAGES = {stages.train_stage, stages.evaluate_stage}
TASKS = {
    fn: task(
        fn, name=fn.__name__.removesuffix("_stage"), cache_policy=NO_CACHE, tags=["gpu"] if fn in MODEL_STAGES else None
    )
    for fn in _STAGES
}


def _run_as_tasks(flow_name: str, recipe_path: str, state_dir: str, overrides: list[str] | None, **options: Any):
    ctx = stages.RunContext(load_recipe(recipe_path, overrides), StatePaths.resolve(state_dir))
    summary = stages.run_recipe(
        ctx, call=lambda stage, *args: TASKS[stage](*args), flow=f"prefect:{flow_name}", **options
    )
    publish(ctx, summary)
    return summary


def publish(ctx: stages.RunContext, summary: dict[str, Any]) -> None:
    """Artifacts for the UI, and an event when augmentation made a new pairs snapshot."""
    from prefect.artifacts import create_markdown_artifact, create_table_artifact
    from prefect.events import emit_event

    key = ctx.recipe.name.lower().replace("_", "-").replace(".", "-")
    if "augment" in summary:
        with ctx.lake() as lake:
            counts = artifacts.view_counts(lake, ctx.recipe.corpus_name)
            sample = artifacts.round_trip_sample(lake, ctx.recipe.corpus_name)
        create_table_artifact(counts, key=f"{key}-views", description="views per augmenter, status and reason")
        create_markdown_artifact(sample, key=f"{key}-round-trips", description="a fixed sample of views")
    if summary.get("evals"):
        create_table_artifact(artifacts.eval_table(summary["evals"]), key=f"{key}-evals", description="evaluation")
    snapshot = summary.get("snapshot")
    if snapshot and snapshot.get("created"):
        emit_event(**artifacts.snapshot_event(ctx.recipe.name, snapshot))


@flow(name="viewmill-recipe")
def recipe_flow(
    recipe_path: str, state_dir: str, preflight_done: bool = False, overrides: list[str] | None = None
) -> dict[str, Any]:
    """Run a recipe end to end: preflight, ingest, augment, pair, train, evaluate."""
    return _run_as_tasks("viewmill-recipe", recipe_path, state_dir, overrides, preflight_done=preflight_done)


@flow(name="viewmill-train")
def train_flow(
    recipe_path: str,
    state_dir: str,
    snapshot: str | None = None,
    preflight_done: bool = False,
    overrides: list[str] | None = None,
) -> dict[str, Any]:
    """Train a recipe's encoder: on an existing pairs snapshot, or on the pairs the recipe
    makes (ingest, augment and pair reuse what the lake already has). No evaluation."""
    return _run_as_tasks(
        "viewmill-train", recipe_path, state_dir, overrides,
        preflight_done=preflight_done, snapshot=snapshot, evaluate=False,
    )  # fmt: skip


@flow(name="viewmill-augment")
def augment_flow(recipe_path: str, state_dir: str, overrides: list[str] | None = None) -> dict[str, Any]:
    """Ingest, augment and pair (no training): the nightly job. A new pairs snapshot emits
    `viewmill.snapshot.created`, which the training deployment's trigger listens for."""
    return _run_as_tasks("viewmill-augment", recipe_path, state_dir, overrides, train=False, evaluate=False)


def ensure_gpu_limit(limit: int = 1) -> None:
    """The server-side concurrency limit behind the `gpu` tag (created once, kept if present)."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            client.read_concurrency_limit_by_tag("gpu")
        except ObjectNotFound:
            client.create_concurrency_limit(tag="gpu", concurrency_limit=limit)


def deployments(recipe_path: str, state_dir: str, *, cron: str = "0 2 * * *") -> list:
    """The single-box deployments `viewmill serve` runs: nightly augmentation on `cron`,
    and training whenever augmentation of this recipe makes a new snapshot."""
    from prefect.events import DeploymentEventTrigger

    recipe = load_recipe(recipe_path)
    params = {"recipe_path": str(Path(recipe_path).resolve()), "state_dir": str(Path(state_dir).resolve())}
    nightly = augment_flow.to_deployment(
        name=f"{recipe.name}-nightly-augment", cron=cron, parameters=params, tags=["viewmill", "augment"]
    )
    on_new_pairs = DeploymentEventTrigger(
        name=f"{recipe.name}-train-on-new-pairs",
        expect={artifacts.SNAPSHOT_EVENT},
        match={"viewmill.recipe": recipe.name},
        parameters={**params, "snapshot": "{{ event.payload.snapshot }}"},
    )
    training = train_flow.to_deployment(
        name=f"{recipe.name}-train", parameters=params, triggers=[on_new_pairs], tags=["viewmill", "train", "gpu"]
    )
    return [nightly, training]
