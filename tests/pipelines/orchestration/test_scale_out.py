"""Augmentation shards as Prefect tasks: on a two-worker Dask cluster, cached across runs,
and resumed after a worker is killed mid-shard."""

import os
import signal
import threading
import time
from pathlib import Path

import duckdb
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


@pytest.fixture
def sharded_recipe(tmp_path) -> Path:
    recipe = tmp_path / "sharded.yaml"
    recipe.write_text(
        f"""
name: sharded
corpus: {{format: senteval, files: [{SNLI / "s1.dev"}, {SNLI / "s2.dev"}], detokenize: true, limit: 240}}
augmenters:
  - {{name: bt_es, method: backtranslation, engine: apertium, path: [en, es, en]}}
  - {{name: bt_ca, method: backtranslation, engine: apertium, path: [en, ca, en]}}
filters: {{min_chrf: 20}}
pair: {{view_a: bt_es, view_b: bt_ca}}
execution: {{shard_sentences: 60, chunk_sentences: 16, retries: 2, retry_delay_s: 0.5}}
""",
        encoding="utf-8",
    )
    return recipe


def lake_rows(state: Path) -> dict[str, list[tuple]]:
    with Lake(StatePaths(state).lake, read_only=True) as lake:
        return {
            "sentences": lake.arrow("SELECT corpus, sentence_id, text FROM sentences ORDER BY ALL").to_pylist(),
            "views": lake.arrow(f"SELECT {VIEW_COLUMNS} FROM views ORDER BY view_id").to_pylist(),
            "translations": lake.arrow(
                "SELECT cache_key, rank, text FROM translations ORDER BY cache_key, rank"
            ).to_pylist(),
        }


def single_process_run(recipe: Path, state: Path) -> dict:
    ctx = RunContext(load_recipe(recipe), StatePaths(state))
    return run_recipe(ctx, train=False, evaluate=False)


def test_two_dask_workers_write_exactly_the_rows_of_a_single_process_run(tmp_path, sharded_recipe, prefect_server):
    from viewmill.pipelines.orchestration.flows import augment_flow, task_runner

    single = single_process_run(sharded_recipe, tmp_path / "single")
    assert single["augment"]["bt_es"]["shards"] == 4

    flow = augment_flow.with_options(task_runner=task_runner("local:2"))
    summary = flow(str(sharded_recipe), str(tmp_path / "dask"))

    assert len({w.rsplit(":", 1)[1] for w in summary["augment"]["bt_es"]["workers"]} - {str(os.getpid())}) == 2
    assert lake_rows(tmp_path / "dask") == lake_rows(tmp_path / "single")
    assert summary["snapshot"]["content_hash"] == single["snapshot"]["content_hash"]
    for name in ("bt_es", "bt_ca"):
        assert summary["augment"][name]["new_views"] == single["augment"][name]["new_views"] == 240


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
    assert (report["new_views"], report["reused_views"], report["cache"]) == (0, 240, {"hits": 0, "misses": 0})

    # A lake made anew at the same place is a different lake: its shards run again.
    import shutil

    shutil.rmtree(state / "lake")
    third = augment_flow(str(sharded_recipe), str(state), return_state=True)
    assert shard_states(third.state_details.flow_run_id) == ["Completed"] * 8
    assert third.result()["augment"]["bt_es"]["new_views"] == 240


SLOW_APERTIUM = """
import os, time
if os.environ.get("VIEWMILL_TEST_SLOW_APERTIUM"):
    import viewmill.augment.apertium as engines
    _translate = engines.ApertiumEngine.translate

    def translate(self, texts, src, tgt, decoding):
        time.sleep(float(os.environ["VIEWMILL_TEST_SLOW_APERTIUM"]))
        return _translate(self, texts, src, tgt, decoding)

    engines.ApertiumEngine.translate = translate
"""


def test_a_worker_killed_mid_shard_is_replaced_and_its_shard_resumes_from_the_cache(
    tmp_path, sharded_recipe, prefect_server, monkeypatch
):
    from distributed import Client, LocalCluster
    from viewmill.pipelines.orchestration.flows import augment_flow, task_runner

    single_process_run(sharded_recipe, tmp_path / "single")
    # Worker processes start with this sitecustomize: every Apertium call takes 0.3 s longer,
    # so a shard is still running when the test kills its worker.
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(SLOW_APERTIUM, encoding="utf-8")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(hooks), str(REPO)]))
    monkeypatch.setenv("VIEWMILL_TEST_SLOW_APERTIUM", "0.3")

    state = tmp_path / "dask"
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True) as cluster, Client(cluster) as client:
        flow = augment_flow.with_options(task_runner=task_runner(cluster.scheduler_address))
        outcome = {}
        runner = threading.Thread(target=lambda: outcome.update(summary=flow(str(sharded_recipe), str(state))))
        runner.start()

        killed = None
        deadline = time.monotonic() + 240
        while killed is None and time.monotonic() < deadline:
            time.sleep(0.5)
            if not (state / "lake" / "catalog.sqlite").exists():
                continue
            try:
                with Lake(StatePaths(state).lake, read_only=True) as lake:
                    written = lake.scalar("SELECT count(*) FROM translations")
            except duckdb.CatalogException:
                continue  # the flow is still creating the lake's tables
            if written >= 32:  # some chunks committed, the shards far from done (4 x 240 translations)
                pids = client.run(os.getpid)
                victim = sorted(pids)[0]
                os.kill(pids[victim], signal.SIGKILL)
                killed = written
        runner.join(timeout=600)
        assert killed is not None, "the run ended before the test could kill a worker"
        assert not runner.is_alive()

    summary = outcome["summary"]
    assert lake_rows(state) == lake_rows(tmp_path / "single")  # nothing lost, nothing twice
    misses = sum(summary["augment"][name]["cache"]["misses"] for name in ("bt_es", "bt_ca"))
    with Lake(StatePaths(state).lake, read_only=True) as lake:
        stored = lake.scalar("SELECT count(*) FROM translations")
    # Every stored translation is a miss of exactly one finished shard attempt, unless the
    # killed attempt stored it: then the shard's rerun found it in the cache (a chunk is 16).
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
