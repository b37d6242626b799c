"""The ingest stage: the recipe's corpus into the lake, with a corpus version.

This is the run's one full read of the corpus (preflight reads a sample of each source). What
only a full read finds (a bad record past the sample, a corpus that keeps no sentence) stops
the stage with the file, row and fix before it opens the lake: all of the corpus is written in
one transaction, or none of it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from viewmill.augment.ingest import IngestResult, IngestStats, ingest
from viewmill.pipelines.context import RunContext
from viewmill.storage.snapshots import record_corpus_version


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


def read_corpus(ctx: RunContext) -> IngestResult:
    """The recipe's corpus, read whole: normalised, filtered and deduplicated sentences."""
    spec = ctx.recipe.corpus
    return ingest(
        spec.files,
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


def ingest_stage(ctx: RunContext) -> IngestReport:
    corpus = read_corpus(ctx)  # a CorpusError here leaves the lake untouched
    with ctx.lake() as lake, lake.transaction():
        new = lake.append("sentences", corpus.sentences, unique_on=("corpus", "sentence_id"))
        new_links = lake.append("nli_pairs", corpus.nli_pairs, unique_on=("corpus", "pair_id"))
        lake.append("rejected_sentences", corpus.rejected, unique_on=("corpus", "sentence_id"))
        ids = corpus.sentences["sentence_id"].to_pylist()
        version = record_corpus_version(lake, ctx.recipe.corpus_name, ids, ctx.run_id)
    return IngestReport(
        corpus=ctx.recipe.corpus_name,
        corpus_version=version,
        sentences=corpus.sentences.num_rows,
        new_sentences=new,
        new_nli_pairs=new_links,
        stats=corpus.stats,
    )
