"""What every stage of a recipe run shares: the recipe, its state directory, settings and run id."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime

from viewmill.augment.ingest import IngestResult, ingest
from viewmill.pipelines.recipe import Recipe
from viewmill.pipelines.state import StatePaths
from viewmill.storage.lake import Lake
from viewmill.storage.settings import Settings


def new_run_id() -> str:
    """Sortable by start time, unique across machines."""
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6]


@dataclass
class RunContext:
    recipe: Recipe
    state: StatePaths
    settings: Settings = field(default_factory=Settings)  # VIEWMILL_* read here when not given
    run_id: str = field(default_factory=lambda: new_run_id())
    _corpus: IngestResult | None = field(default=None, repr=False)

    def lake(self, *, read_only: bool = False) -> Lake:
        """The run's lake: read-only (no writer lock) for stages that only read."""
        return self.settings.open_lake(self.state.lake, read_only=read_only)

    def corpus(self) -> IngestResult:
        """The recipe's corpus, read once per run (preflight and ingest share it)."""
        if self._corpus is None:
            spec = self.recipe.corpus
            self._corpus = ingest(
                spec.files,
                corpus=self.recipe.corpus_name,
                fmt=spec.format,
                lang=spec.lang,
                detokenize=spec.detokenize,
                min_words=spec.min_words,
                max_words=spec.max_words,
                limit=spec.limit,
                run_id=self.run_id,
                nli_links=self.recipe.wants_nli_links,
                on_error=spec.on_error,
                options=spec.read_options(),
            )
        return self._corpus
