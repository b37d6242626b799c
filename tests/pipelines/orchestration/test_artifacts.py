"""What a run shows in Prefect, computed from a real lake: its own views (not the lake's),
a sample of them, one log line per stage, the training table, the snapshot event."""

from viewmill.pipelines.orchestration import artifacts
from viewmill.pipelines.recipe import load_recipe
from viewmill.pipelines.run import RunContext, run_recipe
from viewmill.pipelines.stages.train import TrainResult
from viewmill.pipelines.state import StatePaths
from viewmill.storage.lake import Lake
from viewmill.storage.snapshots import Snapshot
from viewmill.train.loop import TrainReport

from tests.conftest import needs_apertium


@needs_apertium
def test_artifacts_count_the_runs_own_views_and_a_new_snapshot_makes_an_event(tmp_path, tiny_recipe):
    state = StatePaths(tmp_path / "state")
    # Another configuration's views of the same corpus are in the lake first: not this run's.
    other = load_recipe(tiny_recipe, ["filters.max_length_ratio=2.5"])
    run_recipe(RunContext(other, state), train=False, evaluate=False)
    ctx = RunContext(load_recipe(tiny_recipe), state)
    summary = run_recipe(ctx)
    configs = {name: report["config_hash"] for name, report in summary["augment"].items()}
    version = summary["ingest"]["corpus_version"]
    with Lake(state.lake, read_only=True) as lake:
        assert lake.scalar("SELECT count(*) FROM views") == 80, "two configurations, 40 views each"
        counts = artifacts.run_view_counts(lake, ctx.run_id, version, configs)
        sample = artifacts.round_trip_sample(lake, version, configs, n=3)
        again = artifacts.run_view_counts(lake, "a-later-run", version, configs)
    assert sum(r["views"] for r in counts) == 40 and {r["augmenter"] for r in counts} == {"bt_es", "bt_ca"}
    assert sum(r["written_by_run"] for r in counts) == 40, "this run wrote every one of its views"
    kept = sum(r["views"] for r in counts if r["status"] == "kept")
    assert kept == sum(summary["augment"][name]["kept"] for name in configs)
    assert [r["views"] for r in again] == [r["views"] for r in counts] and not any(r["written_by_run"] for r in again)
    assert sample.count("\n") == 2 + 6, "three sources, two views each (this run's configurations only)"
    event = artifacts.snapshot_event("tiny", summary["snapshot"])
    assert event["event"] == "viewmill.snapshot.created"
    assert event["payload"]["snapshot"] == summary["snapshot"]["name"]
    assert artifacts.eval_table(summary["evals"])[0]["model"] == "untrained"


def test_each_stage_result_is_one_line_that_names_what_it_made():
    snapshot = Snapshot("tiny-abc", 18, "h", 7, created=False)
    assert artifacts.describe_stage(snapshot) == (
        "pairs snapshot tiny-abc: 18 pairs, reused (an identical snapshot existed); lake version 7"
    )
    report = TrainReport(steps=4, pairs=18, first_loss=1.5, last_loss=1.25, seconds=2.0, model_dir="m",
                         dev_evals=[(2, 61.5), (4, 60.0)], selected_step=2)  # fmt: skip
    trained = TrainResult("0123456789abcdef", "/state/models/tiny-0123", reused=False, selected_step=2, report=report)
    line = artifacts.describe_stage(trained)
    assert line == "train: model 0123456789ab at /state/models/tiny-0123 (trained 4 steps); selected step 2"
    reused = TrainResult("0123456789abcdef", "/m", reused=True, selected_step=0)
    best_at_start = "(reused); selected step 0 (the starting model scored best on dev)"
    assert artifacts.describe_stage(reused).endswith(best_at_start)
    assert artifacts.describe_stage({"not": "a stage result"}) is None

    table = artifacts.training_markdown(trained.as_dict(), {"name": "tiny-abc", "n_pairs": 18})
    assert "| path | /state/models/tiny-0123 |" in table and "| selected step | 2 |" in table
    assert "| pairs snapshot | tiny-abc (18 pairs) |" in table and "| loss | 1.5000 -> 1.2500 |" in table
    assert "| 2 | 61.50 |" in table, "the dev score of each evaluated step"
    assert "| trained | reused" in artifacts.training_markdown(reused.as_dict(), None)
