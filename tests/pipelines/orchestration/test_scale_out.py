"""Augmentation shards as Prefect tasks: on a two-worker Dask cluster, cached across runs,
and resumed after a worker is killed mid-shard."""

import os
import signal
import threading
import time
from pathlib import Path

import pytest
from viewmill.pipelines.recipe import load_recipe
from viewmill.pipelines.run import RunContext, run_recipe
from viewmill.pipelines.state import StatePaths
from viewmill.storage.lake import Lake

from tests.conftest import REPO, needs_apertium

pytestmark = [needs_apertium, pytest.mark.slow]

SNLI = REPO / "recipes" / "data" / "snli"
# Rows as a user compares them: everything but when and in which run they were written.
VIEW_COLUMNS = "view_id, sentence_id, augmenter, config_hash, text, lang, status, reject_reason, quality"


@pytest.fixture(scope="module")
def sharded_recipe(tmp_path_factory) -> Path:
    recipe = tmp_path_factory.mktemp("recipe") / "sharded.yaml"
    recipe.write_text(
        f"""
name: sharded
corpus: {{format: senteval, files: [{SNLI / "s1.dev"}, {SNLI / "s2.dev"}], detokenize: true, limit: 120}}
augmenters:
  - {{name: bt_es, method: backtranslation, engine: apertium, path: [en, es, en]}}
  - {{name: bt_ca, method: backtranslation, engine: apertium, path: [en, ca, en]}}
filters: {{min_chrf: 20}}
pair: {{view_a: bt_es, view_b: bt_ca}}
execution: {{shard_sentences: 30, chunk_sentences: 16, retries: 2, retry_delay_s: 0.5}}
""",
        encoding="utf-8",
    )
    return recipe


def lake_rows(state: Path) -> dict[str, list[tuple]]:
    with Lake(StatePaths(state).lake, read_only=True) as lake:
        return {
            "sentences": lake.arrow("SELECT corpus, sentence_id, text FROM sentences ORDER BY ALL").to_pylist(),
            "views": lake.arrow(
                f"SELECT {VIEW_COLUMNS}, provenance.cache_keys AS cache_keys FROM views ORDER BY view_id"
            ).to_pylist(),
            "translations": lake.arrow(
                "SELECT cache_key, rank, text FROM translations ORDER BY cache_key, rank"
            ).to_pylist(),
        }


@pytest.fixture(scope="module")
def single_run(sharded_recipe, tmp_path_factory) -> dict:
    """The recipe run in one process, the reference of the Dask runs: its summary and lake rows."""
    state = tmp_path_factory.mktemp("single")
    ctx = RunContext(load_recipe(sharded_recipe), StatePaths(state))
    summary = run_recipe(ctx, train=False, evaluate=False)
    return {"summary": summary, "rows": lake_rows(state)}


def test_two_dask_workers_write_exactly_the_rows_of_a_single_process_run(
    tmp_path, sharded_recipe, single_run, prefect_server
):
    from viewmill.pipelines.orchestration.flows import augment_flow, task_runner

    single = single_run["summary"]
    assert single["augment"]["bt_es"]["shards"] == 4

    flow = augment_flow.with_options(task_runner=task_runner("local:2"))
    summary = flow(str(sharded_recipe), str(tmp_path / "dask"))

    assert len({w.rsplit(":", 1)[1] for w in summary["augment"]["bt_es"]["workers"]} - {str(os.getpid())}) == 2
    assert lake_rows(tmp_path / "dask") == single_run["rows"]
    assert summary["snapshot"]["content_hash"] == single["snapshot"]["content_hash"]
    for name in ("bt_es", "bt_ca"):
        assert summary["augment"][name]["new_views"] == single["augment"][name]["new_views"] == 120


def test_shard_results_are_cached_across_runs_and_recomputed_for_a_new_lake(tmp_path, sharded_recipe, prefect_server):
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
    from viewmill.pipelines.orchestration.flows import augment_flow

    def shard_states(flow_run_id) -> list[str]:
        async def read():
            async with get_client() as client:
                runs = await client.read_task_runs(
                    flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id]))
                )
                return sorted(run.state.name for run in runs if run.name.startswith("augment-shard"))

        return asyncio.run(read())

    state = tmp_path / "state"
    first = augment_flow(str(sharded_recipe), str(state), return_state=True)
    assert shard_states(first.state_details.flow_run_id) == ["Completed"] * 8
    assert (state / "results").is_dir() and any((state / "results").iterdir())  # results persisted

    second = augment_flow(str(sharded_recipe), str(state), return_state=True)
    assert shard_states(second.state_details.flow_run_id) == ["Cached"] * 8
    report = second.result()["augment"]["bt_es"]
    assert (report["new_views"], report["reused_views"], report["cache"]) == (0, 120, {"hits": 0, "misses": 0})

    # A lake made anew at the same place is a different lake: its shards run again.
    import shutil

    shutil.rmtree(state / "lake")
    third = augment_flow(str(sharded_recipe), str(state), return_state=True)
    assert shard_states(third.state_details.flow_run_id) == ["Completed"] * 8
    assert third.result()["augment"]["bt_es"]["new_views"] == 120


PAUSING_APERTIUM = """
import os, time
from pathlib import Path
if os.environ.get("VIEWMILL_TEST_APERTIUM_CALLS"):
    import viewmill.augment.apertium as engines
    _translate = engines.ApertiumEngine.translate

    def translate(self, texts, src, tgt, decoding):
        calls = Path(os.environ["VIEWMILL_TEST_APERTIUM_CALLS"], str(os.getpid()))
        count = int(calls.read_text() or 0) + 1 if calls.exists() else 1
        calls.write_text(str(count))
        deadline = time.monotonic() + 300  # a test that never kills still ends
        while count == 2 and Path(os.environ["VIEWMILL_TEST_APERTIUM_PAUSE"]).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return _translate(self, texts, src, tgt, decoding)

    engines.ApertiumEngine.translate = translate
"""


def paused_worker(calls: Path) -> int | None:
    """A worker process paused at its 2nd Apertium call: its first shard has committed the
    first leg of its first chunk (each call's translations are committed before the next
    call) and has more to do (a shard of 25 to 33 sentences is 2 chunks of two legs)."""
    for record in calls.iterdir():
        if record.read_text() == "2":  # empty while the worker writes it
            return int(record.name)
    return None


def views_by_shard(views: list[dict]) -> dict[tuple[str, int], list[dict]]:
    """Views by augmenter and shard (the rule of `Shard.bounds`: 4 equal ranges of an id's
    first 32 bits here)."""
    grouped: dict[tuple[str, int], list[dict]] = {}
    for view in views:
        grouped.setdefault((view["augmenter"], int(view["sentence_id"][:8], 16) * 4 >> 32), []).append(view)
    return grouped


def assert_nothing_lost_nothing_twice(resumed: dict, single: dict) -> None:
    """The resumed run's rows are an uninterrupted run's, except the texts of the killed shard:
    Apertium's tagger carries context from sentence to sentence, and the shard's rerun starts
    on a fresh pipeline mid-shard, so a few of its later translations may differ (as the
    ApertiumEngine docstring says; the cache keeps what the killed attempt stored)."""
    assert resumed["sentences"] == single["sentences"]
    resumed_views, single_views = views_by_shard(resumed["views"]), views_by_shard(single["views"])
    assert {key: [v["view_id"] for v in views] for key, views in resumed_views.items()} == {
        key: [v["view_id"] for v in views] for key, views in single_views.items()
    }
    changed = [key for key in single_views if resumed_views[key] != single_views[key]]
    assert len(changed) <= 1, f"only the killed worker's shard may differ, not {changed}"
    stored = translations_by_key(resumed["translations"])
    assert len(stored) == len(resumed["translations"]), "a translation stored twice"
    assert {key for key, _ in stored} == {key for view in resumed["views"] for key in view["cache_keys"]}
    kept = {
        key for shard, views in single_views.items() if shard not in changed for v in views for key in v["cache_keys"]
    }
    assert translations_by_key(resumed["translations"], kept) == translations_by_key(single["translations"], kept)


def translations_by_key(rows: list[dict], keys: set[str] | None = None) -> dict[tuple[str, int], str]:
    """{(cache key, rank): text} of the translations rows, those of `keys` only when given."""
    return {(r["cache_key"], r["rank"]): r["text"] for r in rows if keys is None or r["cache_key"] in keys}


def test_a_worker_killed_mid_shard_is_replaced_and_its_shard_resumes_from_the_cache(
    tmp_path, sharded_recipe, single_run, prefect_server, monkeypatch
):
    from distributed import LocalCluster
    from viewmill.pipelines.orchestration.flows import augment_flow, task_runner

    # Worker processes start with this sitecustomize: each counts its Apertium calls and waits
    # at its 2nd while the pause file exists, so the test kills a worker mid-shard, between commits.
    hooks, calls, pause = tmp_path / "hooks", tmp_path / "apertium-calls", tmp_path / "pause"
    hooks.mkdir()
    calls.mkdir()
    pause.touch()
    (hooks / "sitecustomize.py").write_text(PAUSING_APERTIUM, encoding="utf-8")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(hooks), str(REPO)]))
    monkeypatch.setenv("VIEWMILL_TEST_APERTIUM_CALLS", str(calls))
    monkeypatch.setenv("VIEWMILL_TEST_APERTIUM_PAUSE", str(pause))

    state = tmp_path / "dask"
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True) as cluster:
        flow = augment_flow.with_options(task_runner=task_runner(cluster.scheduler_address))
        outcome = {}
        runner = threading.Thread(target=lambda: outcome.update(summary=flow(str(sharded_recipe), str(state))))
        runner.start()

        killed = None
        while killed is None and runner.is_alive():
            time.sleep(0.1)
            killed = paused_worker(calls)
        if killed is not None:
            os.kill(killed, signal.SIGKILL)
        pause.unlink()  # the other worker, and the killed one's replacement, go on
        runner.join(timeout=600)
        assert killed is not None, "the run ended before the test could kill a worker"
        assert not runner.is_alive()

    summary = outcome["summary"]
    assert_nothing_lost_nothing_twice(lake_rows(state), single_run["rows"])
    misses = sum(summary["augment"][name]["cache"]["misses"] for name in ("bt_es", "bt_ca"))
    with Lake(StatePaths(state).lake, read_only=True) as lake:
        stored = lake.scalar("SELECT count(*) FROM translations")
    # Every stored translation is a miss of exactly one finished shard attempt, unless the
    # killed attempt stored it: then the shard's rerun found it in the cache (a leg of a chunk is 16).
    assert stored - misses >= 16, (killed, stored, misses)


def test_a_local_dask_cluster_leaves_this_process_threads_alone(monkeypatch):
    from prefect import flow
    from viewmill.pipelines.orchestration.flows import task_runner

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)

    @flow(task_runner=task_runner("local:1"))
    def start_and_stop():
        return os.environ.get("OMP_NUM_THREADS")

    # The flow trains in this process: a cluster must not make it single-threaded.
    assert start_and_stop() is None and "OMP_NUM_THREADS" not in os.environ
