"""One augmenter's views in this process, every shard, then its report: how tests make views
(a run makes each shard in its own job: `viewmill.pipelines.stages.augment`)."""

from __future__ import annotations

from collections.abc import Callable

from viewmill.augment.augmenters import AugmenterSpec
from viewmill.augment.meaning import MeaningJudge
from viewmill.augment.quality import FilterSpec
from viewmill.augment.views import AugmentReport, Shard, make_shard_views, summarise
from viewmill.storage.lake import Lake


def make_views(
    lake: Lake,
    corpus: str,
    spec: AugmenterSpec,
    filters: FilterSpec,
    *,
    run_id: str,
    chunk_size: int = 512,
    shards: int = 1,
    on_progress: Callable[[int, int], None] | None = None,
    judge: MeaningJudge | None = None,
) -> AugmentReport:
    """Every shard of one augmenter in this process, then the augmenter's report."""
    reports = [
        make_shard_views(
            lake, corpus, spec, filters, run_id=run_id, shard=Shard(i, shards), chunk_size=chunk_size,
            on_progress=on_progress, judge=judge,
        )
        for i in range(shards)
    ]  # fmt: skip
    return summarise(lake, corpus, reports)
