"""The ingest stage: the recipe's corpus into the lake, with a corpus version.

This is the run's one full read of the corpus (preflight reads a sample of each source). The
kept rows stream from the reader into the lake inside one transaction, so memory stays flat
however large the corpus; what only a full read finds (a bad record past the sample, a corpus
that keeps no sentence) stops the stage with the file, row and fix and rolls the transaction
back: all of the corpus is written, or none of it."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from itertools import chain
from typing import Any

import numpy as np
import pyarrow as pa
from viewmill.augment.ingest.corpus import CorpusStream, IngestSettings, IngestStats
from viewmill.pipelines.context import RunContext
from viewmill.storage.corpus_versions import record_corpus_version
from viewmill.storage.hex_ids import ids_of
from viewmill.storage.lake import Lake
from viewmill.storage.schema import SENTENCES


@dataclass(frozen=True)
class IngestReport:
    corpus: str
    corpus_version: str
    sentences: int  # kept by this read of the corpus
    new_sentences: int  # of those, not in the lake before
    new_nli_pairs: int
    stats: IngestStats

    def as_dict(self) -> dict[str, Any]:
        """The run summary's flat form: the fields, then the reader's counts."""
        fields = {name: value for name, value in asdict(self).items() if name != "stats"}
        return {**fields, **asdict(self.stats)}


def corpus_stream(ctx: RunContext) -> CorpusStream:
    """The recipe's corpus, to be read once: normalised, filtered and deduplicated sentences."""
    spec = ctx.recipe.corpus
    settings = IngestSettings(
        corpus=ctx.recipe.corpus_name,
        fmt=spec.format,
        lang=spec.lang,
        detokenize=spec.detokenize,
        min_words=spec.min_words,
        max_words=spec.max_words,
        limit=spec.limit,
        run_id=ctx.run_id,
        nli_links=ctx.recipe.wants_nli_links,
        on_error=spec.on_error,
        options=spec.read_options(),
    )
    return CorpusStream(spec.files, settings)


def ingest_stage(ctx: RunContext) -> IngestReport:
    corpus = corpus_stream(ctx)  # a missing source stops here, before the lake is opened
    name = ctx.recipe.corpus_name
    batches = corpus.batches()
    first = next(batches, None)  # an empty corpus, or a bad record before the first rows kept, stops here too
    with ctx.lake() as lake, lake.transaction():  # a CorpusError later in the read rolls every write back
        known = stored_sentence_ids(lake, name)
        new = lake.append("sentences", unstored(chain([first] if first else [], batches), known))
        new_links = lake.append("nli_pairs", corpus.nli_pairs, unique_on=("corpus", "pair_id"))
        lake.append("rejected_sentences", corpus.rejected(), unique_on=("corpus", "sentence_id"))
        version = record_corpus_version(lake, name, corpus.kept_ids(), ctx.run_id)
    return IngestReport(
        corpus=name,
        corpus_version=version,
        sentences=corpus.stats.kept,
        new_sentences=new,
        new_nli_pairs=new_links,
        stats=corpus.stats,
    )


def stored_sentence_ids(lake: Lake, corpus: str) -> np.ndarray:
    """The 64-bit ids of the corpus's sentences already in the lake, sorted. An id of another
    form (written outside viewmill) can equal no id ingest makes, so it is passed over."""
    query = (
        "SELECT ('0x' || sentence_id)::UBIGINT AS id FROM sentences "
        "WHERE corpus = ? AND regexp_full_match(sentence_id, '[0-9a-f]{16}') ORDER BY id"
    )
    return lake.arrow(query, [corpus])["id"].to_numpy()


def unstored(batches: Iterable[pa.RecordBatch], known: np.ndarray) -> pa.RecordBatchReader:
    """The rows whose ids are not among `known` (sorted), as a stream: ingest already dropped
    repeats within the read, so this is all the lake's append has to check."""

    def fresh() -> Iterator[pa.RecordBatch]:
        for batch in batches:
            ids = ids_of(batch["sentence_id"])
            stored = known[np.minimum(np.searchsorted(known, ids), len(known) - 1)] == ids
            yield batch.filter(pa.array(~stored)) if stored.any() else batch

    # A corpus new to the lake (the usual case) has nothing to check.
    return pa.RecordBatchReader.from_batches(SENTENCES, fresh() if len(known) else iter(batches))
