"""Sweeps: configurations over one pairs snapshot, recorded with their settings, the best
chosen on the selection task only, a table and a plot."""

import json

import pytest
import yaml
from viewmill.pipelines.recipe import RecipeError, load_recipe
from viewmill.pipelines.state import StatePaths
from viewmill.pipelines.sweep import run_sweep
from viewmill.storage.lake import Lake

from tests.conftest import needs_apertium

pytestmark = needs_apertium


def with_sweep(recipe_path, sweep: dict, extra_tasks: list | None = None):
    raw = yaml.safe_load(recipe_path.read_text(encoding="utf-8"))
    raw["sweep"] = sweep
    raw["augmenters"].append({"name": "same", "method": "identity"})
    if extra_tasks:
        raw["evaluate"]["tasks"] += extra_tasks
    recipe_path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return recipe_path


def test_sweep_runs_every_configuration_records_them_and_selects_on_the_dev_task(tmp_path, tiny_recipe):
    recipe = with_sweep(
        tiny_recipe,
        {
            "select_on": "dev",
            "grid": {"train.encoder_lr": [1.0e-3, 1.0e-5]},
            "configs": [{"label": "identity-pairs", "set": {"pair.view_b": "same", "train.encoder_lr": 1.0e-3}}],
        },
        extra_tasks=[{"name": "dev", "format": "stsb", "path": "sts.csv"}],
    )
    state = StatePaths(tmp_path / "state")
    report = run_sweep(recipe, state)

    labels = [r.label for r in report.results]
    assert labels == ["encoder_lr=0.001", "encoder_lr=1e-05", "identity-pairs"]
    # The grid's configurations share the recipe's pairs; the listed one asked for others.
    assert report.results[0].snapshot == report.results[1].snapshot != report.results[2].snapshot
    assert len({r.model_id for r in report.results}) == 3
    best = max(report.results, key=lambda r: r.results["dev"])
    assert [r.label for r in report.results if r.selected] == [best.label]

    with Lake(state.lake, read_only=True) as lake:
        rows = lake.arrow("SELECT * FROM sweeps ORDER BY label").to_pylist()
        evals = {
            (row["model"], row["task"]): row["value"]
            for row in lake.arrow("SELECT model, task, value FROM evals WHERE subset = 'all'").to_pylist()
        }
    assert [row["label"] for row in rows] == sorted(labels)
    for row in rows:
        result = next(r for r in report.results if r.label == row["label"])
        assert json.loads(row["overrides"]) == result.overrides
        assert json.loads(row["train_config"])["encoder_lr"] == result.overrides["train.encoder_lr"]
        assert row["select_value"] == evals[(row["model_id"], "dev")]
        assert json.loads(row["results"]) == {task: evals[(row["model_id"], task)] for task in ("dev", "sts-fixture")}
        assert row["selected"] == (row["label"] == best.label)

    table = report.markdown_path.read_text(encoding="utf-8")
    assert "start (untrained)" in table and f"**{best.label}** (selected)" in table
    assert report.plot_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # A second sweep reuses every model and stored evaluation: same figures.
    again = run_sweep(recipe, state)
    assert [r.results for r in again.results] == [r.results for r in report.results]


def test_a_sweep_with_a_broken_configuration_fails_before_anything_runs(tmp_path, tiny_recipe):
    recipe = with_sweep(tiny_recipe, {"select_on": "sts-fixture", "configs": [
        {"label": "ok", "set": {"train.encoder_lr": 1.0e-4}},
        {"label": "bad", "set": {"train.options.momentum": 2.0}},
    ]})  # fmt: skip
    state = StatePaths(tmp_path / "state")
    with pytest.raises(RecipeError, match=r"train\.options\.momentum: Input should be less than or equal to 1"):
        run_sweep(recipe, state)
    assert not (state.root / "lake").exists()


def test_sweep_section_is_validated(tmp_path, tiny_recipe):
    with pytest.raises(RecipeError, match="select_on 'nope' must name an evaluate task"):
        load_recipe(with_sweep(tiny_recipe, {"select_on": "nope", "grid": {"train.encoder_lr": [1e-5]}}))
    with pytest.raises(RecipeError, match="needs grid or configs"):
        load_recipe(with_sweep(tiny_recipe, {"select_on": "sts-fixture"}))


@pytest.mark.slow
def test_sweep_flow_runs_the_configurations_as_tasks_and_publishes_the_table(tmp_path, tiny_recipe, prefect_server):
    import asyncio

    from prefect.client.orchestration import get_client
    from viewmill.pipelines.orchestration.flows import sweep_flow

    recipe = with_sweep(tiny_recipe, {"select_on": "sts-fixture", "grid": {"train.seed": [1, 2]}})
    result = sweep_flow(str(recipe), str(tmp_path / "state"))
    assert [r["label"] for r in result["results"]] == ["seed=1", "seed=2"]
    assert result["selected"] in ("seed=1", "seed=2")

    async def sweep_table() -> str:
        async with get_client() as client:
            found = await client.read_artifacts()
            return next(a.data for a in found if a.key == "tiny-sweep")

    assert "(selected)" in asyncio.run(sweep_table())
