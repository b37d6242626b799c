"""The pair stage: a pairs snapshot of the recipe's view configuration pairings (with its
hard negatives, when it asks for them), or one that exists."""

from __future__ import annotations

import json
import logging

from viewmill.pipelines.context import RunContext
from viewmill.storage.lake import Lake
from viewmill.storage.snapshots import Snapshot, create_pairs_snapshot, snapshot_info, snapshot_tables

log = logging.getLogger(__name__)


def pair_stage(ctx: RunContext, pairings: list[tuple[str, str]], corpus_version: str) -> Snapshot:
    """The snapshot pairing each (a, b) view configuration's kept views of every sentence."""
    negatives = ctx.recipe.pair.negatives
    chosen = negatives.pairings if negatives is not None else None
    # `pairings` are the configurations of pair.pairs, in its order: name -> configuration.
    by_name = dict(zip(ctx.recipe.pair.pairs, pairings, strict=True))
    with ctx.lake() as lake:
        snapshot = create_pairs_snapshot(
            lake,
            recipe=ctx.recipe.name,
            corpus=ctx.recipe.corpus_name,
            corpus_version=corpus_version,
            pairings=pairings,
            run_id=ctx.run_id,
            negatives=negatives,
            negative_pairings=None if chosen is None else [by_name[tuple(p)] for p in chosen],
            keep_identical=bool(ctx.recipe.pair.keep_identical),
        )
        log.info(identical_line(lake, snapshot))
        if negatives is not None:
            log.info(negatives_line(lake, snapshot))
        return snapshot


def identical_line(lake: Lake, snapshot: Snapshot) -> str:
    """What the stage log says of the pairs dropped for identical texts."""
    dropped = lake.scalar("SELECT identical_dropped FROM snapshots WHERE snapshot = ?", [snapshot.name])
    if dropped is None:
        return f"pairs snapshot {snapshot.name}: made before identical pairs were dropped (it may hold some)"
    return (
        f"pairs snapshot {snapshot.name}: {snapshot.n_pairs} pairs; {dropped} with identical texts dropped "
        "(they teach nothing; pair.keep_identical: true keeps them)"
    )


def negatives_line(lake: Lake, snapshot: Snapshot) -> str:
    """What the stage log says of a snapshot's hard negatives: their source, how many per
    pair, and how many pairs were dropped for having fewer."""
    note = json.loads(lake.scalar("SELECT negatives FROM snapshots WHERE snapshot = ?", [snapshot.name]))
    if "with_negatives" in note:  # pair.negatives.pairings gave them to some pairings' pairs
        pairings = ", ".join(f"[{a}, {b}]" for a, b in note["pairings"])
        return (
            f"pairs snapshot {snapshot.name}: {snapshot.n_pairs} pairs, {note['with_negatives']} of them (pairings "
            f"{pairings}) with {note['per_anchor']} {note['source']} negative(s) each, the others with none; "
            f"{note['dropped']} pairs dropped for having fewer"
        )
    return (
        f"pairs snapshot {snapshot.name}: {snapshot.n_pairs} pairs with {note['per_anchor']} {note['source']} "
        f"negative(s) each; {note['dropped']} pairs dropped for having fewer"
    )


def existing_snapshot(ctx: RunContext, name: str) -> Snapshot:
    """The named snapshot, for training on pairs made earlier: unknown names are refused, and so
    is a snapshot whose pairs or negatives files changed since viewmill wrote them (before
    anything starts)."""
    with ctx.lake(read_only=True) as lake:
        snapshot = snapshot_info(lake, name)
        lake.require_intact(snapshot_tables(lake, name), f"train on pairs snapshot '{name}'")
        return snapshot
