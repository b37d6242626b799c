"""With the meaning filter, a shard of a later augmenter judges near-duplicates against the
earlier augmenters' views of the same sentences: the flow makes it wait for their shard,
so workers running side by side never make those views twice."""

from __future__ import annotations

import threading
import time

from prefect import flow, task
from prefect.task_runners import ThreadPoolTaskRunner
from viewmill.augment.data_augmenters import Identity
from viewmill.augment.views import Shard, ShardReport
from viewmill.pipelines.orchestration import flows
from viewmill.pipelines.recipe import load_recipe
from viewmill.pipelines.run import RunContext
from viewmill.pipelines.stages.augment import ShardJob
from viewmill.pipelines.state import StatePaths

RECIPE = """
name: order
corpus: {files: [corpus.txt]}
augmenters:
  - {name: first, method: identity}
  - {name: second, method: identity}
pair: {view_a: first, view_b: second}
"""


def test_a_later_augmenters_shard_starts_after_the_earlier_augmenters_same_shard(tmp_path, monkeypatch, prefect_server):
    (tmp_path / "corpus.txt").write_text("one sentence here\n", encoding="utf-8")
    (tmp_path / "order.yaml").write_text(RECIPE, encoding="utf-8")
    ctx = RunContext(load_recipe(tmp_path / "order.yaml"), StatePaths(tmp_path / "state"))
    first, second = Identity(name="first"), Identity(name="second")
    jobs = [
        ShardJob(
            str(ctx.state.lake),
            "c",
            spec,
            ctx.recipe.filters,
            Shard(index, 2),
            "h",
            "s",
            "e",
            "r",
            8,
            ctx.settings,
            earlier=(first,) if spec is second else (),
        )
        for spec in (first, second)
        for index in range(2)
    ]
    events: list[tuple[str, str, int]] = []
    lock = threading.Lock()

    @task
    def recorded_shard(**kwargs):
        name, index = kwargs["spec"].name, kwargs["shard"]["index"]
        with lock:
            events.append(("start", name, index))
        time.sleep(0.3 if name == "first" else 0)  # the earlier augmenter is the slow one
        with lock:
            events.append(("end", name, index))
        return ShardReport(augmenter=name, config_hash="h", sentences=1, new_views=1, reused_views=0)

    monkeypatch.setattr(flows, "augment_shard_task", recorded_shard)
    monkeypatch.setattr(flows, "shards_missing_views", lambda root, jobs, settings=None: [False] * len(jobs))

    @flow(task_runner=ThreadPoolTaskRunner(max_workers=4))
    def side_by_side():
        return flows.submit_shards(ctx, jobs)

    assert len(side_by_side()) == 4
    for index in range(2):
        assert events.index(("end", "first", index)) < events.index(("start", "second", index)), events
