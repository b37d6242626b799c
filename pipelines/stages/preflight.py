"""The run's input checks, before anything is written.

The corpus is checked on a sample, not read whole: ingest reads it once, and reports what
only a full read finds (a bad record past the sample, a corpus that keeps no sentence) with the
same file, row and fix, before it writes."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import islice
from pathlib import Path

from viewmill.augment.augmenters import AugmenterConfig, make_producer
from viewmill.augment.engines import EngineError
from viewmill.augment.ingest.readers import READERS
from viewmill.augment.ingest.source_files import CorpusError, Malformed, require_file
from viewmill.pipelines.context import RunContext
from viewmill.pipelines.recipe import Recipe
from viewmill.storage.catalog import Catalog, check_not_orphaned
from viewmill.storage.integrity import refuse_missing_files
from viewmill.train import distributed
from viewmill.train.encoder import EncoderError, resolve_encoder
from viewmill.train.evaluation import suite
from viewmill.train.mining import MinedNegatives

# Records read from the start of each corpus source (readers stream: a text file is read a
# block at a time, Parquet a batch at a time).
SAMPLE_RECORDS = 10_000


@dataclass(frozen=True)
class PreflightResult:
    sources: int  # corpus sources checked
    sampled: int  # records read from their starts
    encoder: str | None  # the resolved base model, when the recipe trains


def preflight(ctx: RunContext) -> PreflightResult:
    """Check everything that can fail on bad input before anything is written.

    The corpus on a sample (`check_corpus_sample`). Builds every augmenter's producer (engines,
    language directions, WordNet; no weights) and checks the evaluation files and every encoder
    the run will load (training's, the meaning filter's, the miner's: resolved, not loaded).
    The recipe (its name too) was validated when it was loaded. Last, the lake is read, not
    written: every file its catalog lists must be there (`check_lake_files`).
    """
    recipe = ctx.recipe
    settings = ctx.settings  # a data folder without its catalog is never replaced by a new lake
    check_not_orphaned(ctx.state.lake, catalog=settings.catalog_spec(), data_path=settings.data_path)
    sampled = check_corpus_sample(recipe)
    for spec in recipe.augmenters:
        check_augmenter(spec)
    if recipe.filters.meaning is not None:
        distributed.check_device(recipe.filters.meaning.device, "filters.meaning.device")
        check_encoder("filters.meaning.encoder", recipe.filters.meaning.encoder)
    if isinstance(recipe.pair.negatives, MinedNegatives):
        distributed.check_device(recipe.pair.negatives.device, "pair.negatives.device")
        check_encoder("pair.negatives.encoder", recipe.pair.negatives.encoder)
    for task in recipe.eval_tasks():
        suite.check(task)
    if recipe.train is not None:
        distributed.check_device(recipe.train.device)
    encoder = check_encoder("train.encoder", recipe.train.encoder) if recipe.train is not None else None
    check_lake_files(ctx)
    for named in recipe.named_recipes():  # its start runs before this recipe trains, its soup's after
        preflight(RunContext(named, ctx.state, settings))
    return PreflightResult(sources=len(recipe.corpus.files), sampled=sampled, encoder=encoder)


def check_augmenter(spec: AugmenterConfig) -> None:
    """Build the augmenter's producer (engines for every hop of a chain, language directions,
    WordNet; no weights) and close it; an engine's refusal (a hop no installed engine
    translates, with the apt-get line that installs it) names the augmenter and its path."""
    try:
        make_producer(spec).close()  # without the lake: a data-derived producer's identity needs ingest's rows
    except EngineError as exc:
        raise EngineError(f"augmenter {spec.name} ({spec.path_label}): {exc}") from None


def check_lake_files(ctx: RunContext) -> None:
    """Refuse (LakeError) a lake whose catalog lists files that are gone, naming one and the
    commands that mend it (`refuse_missing_files`): a catalog restored older than its data would
    otherwise fail the run on its first read. A new local lake has nothing to check; a PostgreSQL
    catalog is opened as the run opens it (read-only cannot open one the run has yet to make)."""
    catalog = Catalog.parse(ctx.settings.catalog_spec(), ctx.state.lake)
    if catalog.kind != "postgres" and not catalog.exists():
        return
    with ctx.lake(read_only=catalog.kind != "postgres") as lake:
        refuse_missing_files(lake)


def check_corpus_sample(recipe: Recipe, records: int = SAMPLE_RECORDS) -> int:
    """Every source a regular file, where the format reads files (a folder, device or named pipe
    is named as such), then the first `records` records of each, read by the format's reader as
    ingest reads them: its own checks (UTF-16, a Parquet schema, a CSV header, the text column)
    and, with `corpus.on_error: stop`, a malformed record ingest would stop at, in ingest's words.
    Returns the records read."""
    spec = recipe.corpus
    reader = READERS[spec.format]
    if reader.reads_files:  # before any source is opened: a named pipe would block
        for path in spec.files:
            require_file(Path(path))
    # With a limit, ingest stops reading once the corpus is full, unless it collects NLI links.
    reads_all = spec.limit is None or recipe.wants_nli_links
    read = good = 0
    for path in spec.files:
        for record in islice(reader(path, spec.read_options()), records):
            read += 1
            if not isinstance(record, Malformed):
                good += 1
            elif spec.on_error == "stop" and (reads_all or good < spec.limit):
                raise CorpusError(stopped_at(record))
    return read


def stopped_at(record: Malformed) -> str:
    """Ingest's message for the malformed record it stops at."""
    return f"{record.describe()} (or set corpus.on_error: skip to skip and count such records)"


def check_encoder(key: str, ref: str) -> str:
    """Resolve `ref` as the stage that loads it will (weights untouched, their folder checked:
    train/model_files.py); an error names the recipe key and the fix, since these encoders
    load only after ingest has written."""
    try:
        return resolve_encoder(ref)
    except EncoderError as exc:
        raise EncoderError(
            f"{key} '{ref}' cannot be used: {exc}; set {key} to an embedded:NAME encoder, a model directory "
            f"(relative to the recipe) or a hub id, e.g. --set {key}=embedded:all-MiniLM-L6-v2"
        ) from None
