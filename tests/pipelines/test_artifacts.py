from viewmill.pipelines import artifacts
from viewmill.pipelines.recipe import load_recipe
from viewmill.pipelines.run import RunContext, run_recipe
from viewmill.pipelines.state import StatePaths
from viewmill.storage.lake import Lake

from tests.conftest import needs_apertium


@needs_apertium
def test_artifacts_describe_the_run_and_a_new_snapshot_makes_an_event(tmp_path, tiny_recipe):
    state = StatePaths(tmp_path / "state")
    summary = run_recipe(RunContext(load_recipe(tiny_recipe), state))
    with Lake(state.lake, read_only=True) as lake:
        counts = artifacts.view_counts(lake, "tiny")
        sample = artifacts.round_trip_sample(lake, "tiny", n=3)
    assert sum(r["views"] for r in counts) == 40 and {r["augmenter"] for r in counts} == {"bt_es", "bt_ca"}
    assert sample.count("\n") == 2 + 6, "three sources, two views each"
    event = artifacts.snapshot_event("tiny", summary["snapshot"])
    assert event["event"] == "viewmill.snapshot.created"
    assert event["payload"]["snapshot"] == summary["snapshot"]["name"]
    assert artifacts.eval_table(summary["evals"])[0]["model"] == "untrained"
