"""The run's input checks, before anything is written."""

from __future__ import annotations

from dataclasses import dataclass

from viewmill.augment.augmenters import make_producer
from viewmill.pipelines.context import RunContext
from viewmill.storage.catalog import check_not_orphaned
from viewmill.train import distributed
from viewmill.train.encoder import EncoderError, resolve_encoder
from viewmill.train.evaluation import suite
from viewmill.train.mining import MinedNegatives


@dataclass(frozen=True)
class PreflightResult:
    sentences: int  # the corpus's sentences that ingest keeps
    encoder: str | None  # the resolved base model, when the recipe trains


def preflight(ctx: RunContext) -> PreflightResult:
    """Check everything that can fail on bad input before anything is written.

    Reads the whole corpus once: every source is first checked to be a regular file (a
    folder, device or named pipe is named as such) that is not UTF-16, then encoding and
    emptiness. Checks every engine direction, the evaluation files and every encoder the run
    will load (training's, the meaning filter's, the miner's: resolved, not loaded). The
    recipe (its name too) was validated when it was loaded. Nothing here touches the lake.
    """
    recipe = ctx.recipe
    settings = ctx.settings  # a data folder without its catalog is never replaced by a new lake
    check_not_orphaned(ctx.state.lake, catalog=settings.catalog_spec(), data_path=settings.data_path)
    stats = ctx.corpus().stats
    for spec in recipe.augmenters:
        make_producer(spec).close()  # engines, language directions, WordNet
    if recipe.filters.meaning is not None:
        check_encoder("filters.meaning.encoder", recipe.filters.meaning.encoder)
    if isinstance(recipe.pair.negatives, MinedNegatives):
        check_encoder("pair.negatives.encoder", recipe.pair.negatives.encoder)
    for task in recipe.eval_tasks():
        suite.check(task)
    if recipe.train is not None:
        distributed.check_device(recipe.train.device)
    encoder = resolve_encoder(recipe.train.encoder) if recipe.train is not None else None
    return PreflightResult(sentences=stats.kept, encoder=encoder)


def check_encoder(key: str, ref: str) -> None:
    """Resolve `ref` as the stage that loads it will (weights untouched); an error names the
    recipe key and the fix, since these encoders load only after ingest has written."""
    try:
        resolve_encoder(ref)
    except EncoderError as exc:
        raise EncoderError(
            f"{key} '{ref}' cannot be used: {exc}; set {key} to an embedded:NAME encoder, a model directory "
            f"(relative to the recipe) or a hub id, e.g. --set {key}=embedded:all-MiniLM-L6-v2"
        ) from None
