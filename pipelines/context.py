"""What every stage of a recipe run shares: the recipe, its state directory, settings and run id.

A run has one context: the command line makes it, and a flow it hands the run to rebuilds it
from the same validated recipe (`recipe_parameter`) and run id (`RunContext.of`), never from
the recipe file again."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from viewmill.pipelines.recipe import Recipe
from viewmill.pipelines.state import StatePaths
from viewmill.storage.lake import Lake, open_lake

from viewmill.settings import Settings


def new_run_id() -> str:
    """Sortable by start time, unique across machines."""
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6]


def recipe_parameter(recipe: Recipe) -> dict[str, Any]:
    """The validated recipe as JSON for a flow parameter: what its file and overrides set, paths
    resolved. `Recipe.model_validate` of it is the same recipe; a full dump would not always be
    (it would set fields left to their defaults, and some validators read which fields were set)."""
    return recipe.model_dump(mode="json", exclude_unset=True)


@dataclass
class RunContext:
    recipe: Recipe
    state: StatePaths
    settings: Settings = field(default_factory=Settings)  # VIEWMILL_* read here when not given
    run_id: str = field(default_factory=lambda: new_run_id())

    @classmethod
    def of(cls, recipe: Recipe, state_dir: str, settings: Settings | None, run_id: str | None) -> RunContext:
        """The context a flow runs in: the caller's run id when it made one (the command line
        did), else a new one; a deployment's run passes no settings, its worker's VIEWMILL_* give them."""
        return cls(recipe, StatePaths.resolve(state_dir), settings or Settings(), run_id or new_run_id())

    def lake(self, *, read_only: bool = False) -> Lake:
        """The run's lake: read-only (no writer lock) for stages that only read."""
        return open_lake(self.settings, self.state.lake, read_only=read_only)
