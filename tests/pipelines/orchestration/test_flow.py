"""The recipe as a Prefect flow on Prefect's test server: every stage is a task run."""

import pytest
from viewmill.storage.lake import Lake

from tests.conftest import needs_apertium

pytestmark = [needs_apertium, pytest.mark.slow]


def test_recipe_flow_runs_every_stage_as_a_task(tmp_path, tiny_recipe, prefect_server):
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
    from viewmill.pipelines.orchestration.flows import recipe_flow

    state_dir = tmp_path / "state"
    state = recipe_flow(str(tiny_recipe), str(state_dir), return_state=True)
    assert state.is_completed(), state
    summary = state.result()
    assert summary["snapshot"]["n_pairs"] > 10

    async def task_names() -> list[str]:
        async with get_client() as client:
            runs = await client.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[state.state_details.flow_run_id]))
            )
            return sorted(run.name.rsplit("-", 1)[0] for run in runs)

    assert asyncio.run(task_names()) == [
        "augment-finish", "augment-finish", "augment-plan", "augment-shard", "augment-shard",
        "evaluate", "ingest", "pair", "preflight", "train",
    ]  # fmt: skip

    async def artifact_keys() -> dict[str, str]:
        async with get_client() as client:
            found = await client.read_artifacts()
            return {a.key: a.type for a in found if a.key}

    async def task_tags() -> dict[str, list[str]]:
        async with get_client() as client:
            runs = await client.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[state.state_details.flow_run_id]))
            )
            return {run.name.rsplit("-", 1)[0]: sorted(run.tags) for run in runs}

    tags = asyncio.run(task_tags())
    assert tags["train"] == ["gpu"] and tags["evaluate"] == ["gpu"] and tags["ingest"] == []

    from viewmill.pipelines.orchestration.deploy import ensure_gpu_limit

    ensure_gpu_limit()
    ensure_gpu_limit()  # idempotent

    keys = asyncio.run(artifact_keys())
    assert keys["tiny-views"] == "table" and keys["tiny-evals"] == "table"
    assert keys["tiny-round-trips"] == "markdown"
    with Lake(state_dir / "lake", read_only=True) as lake:
        assert lake.scalar("SELECT flow FROM runs") == "prefect:viewmill-recipe"

    from viewmill.pipelines.orchestration.flows import train_flow

    again = train_flow(
        str(tiny_recipe), str(state_dir), snapshot=summary["snapshot"]["name"], overrides=["train.steps=3"],
        return_state=True,
    )  # fmt: skip
    assert again.is_completed(), again
    assert again.result()["train"]["model_id"] != summary["train"]["model_id"]
    with Lake(state_dir / "lake", read_only=True) as lake:
        assert lake.arrow("SELECT flow FROM runs ORDER BY started_at")["flow"].to_pylist() == [
            "prefect:viewmill-recipe", "prefect:viewmill-train"
        ]  # fmt: skip
        assert lake.scalar("SELECT count(*) FROM models") == 2


def test_a_soup_recipe_runs_as_a_flow_its_named_recipes_stages_and_the_soup_as_tasks(
    tmp_path, tiny_recipe, prefect_server
):
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
    from viewmill.pipelines.orchestration.flows import recipe_flow

    from tests.pipelines.test_soup import _soup_recipes

    recipe = _soup_recipes(tiny_recipe, "soup: {recipes: [other.yaml], shares: [0.0, 0.5]}")
    state = recipe_flow(str(recipe), str(tmp_path / "state"), return_state=True)
    assert state.is_completed(), state
    summary = state.result()
    assert summary["soup"]["exported"] and summary["soup"]["model_id"] != summary["train"]["model_id"]

    async def names_and_keys() -> tuple[list[str], dict[str, str]]:
        async with get_client() as client:
            runs = await client.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[state.state_details.flow_run_id]))
            )
            found = await client.read_artifacts()
            return [run.name.rsplit("-", 1)[0] for run in runs], {a.key: a.type for a in found if a.key}

    names, keys = asyncio.run(names_and_keys())
    assert names.count("train") == 2 and names.count("preflight") == 2 and names.count("soup") == 1
    assert keys["soup-soup"] == "markdown"
