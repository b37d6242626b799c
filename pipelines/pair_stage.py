"""The pair stage: a pairs snapshot of two view configurations, or one that exists."""

from __future__ import annotations

from viewmill.pipelines.context import RunContext
from viewmill.storage.snapshots import Snapshot, create_pairs_snapshot, snapshot_info


def pair_stage(ctx: RunContext, config_a: str, configs_b: list[str], corpus_version: str) -> Snapshot:
    with ctx.lake() as lake:
        return create_pairs_snapshot(
            lake,
            recipe=ctx.recipe.name,
            corpus=ctx.recipe.corpus_name,
            corpus_version=corpus_version,
            config_a=config_a,
            configs_b=configs_b,
            run_id=ctx.run_id,
        )


def existing_snapshot(ctx: RunContext, name: str) -> Snapshot:
    """The named snapshot, for training on pairs made earlier: unknown names are refused, and so
    is a snapshot whose pairs files changed since viewmill wrote them (before anything starts)."""
    with ctx.lake(read_only=True) as lake:
        snapshot = snapshot_info(lake, name)
        lake.require_intact(("pairs",), f"train on pairs snapshot '{name}'")
        return snapshot
