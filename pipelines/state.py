"""Where a project's state lives: the lake, trained models and Prefect's home."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from viewmill.paths import resolve_user_path

STATE_ENV = "VIEWMILL_HOME"
DEFAULT_STATE = ".viewmill"


@dataclass(frozen=True)
class StatePaths:
    root: Path

    @classmethod
    def resolve(cls, state_dir: Path | str | None = None) -> StatePaths:
        chosen = state_dir or os.environ.get(STATE_ENV) or DEFAULT_STATE
        return cls(resolve_user_path(chosen, "state directory", f"point --state-dir (or {STATE_ENV}) at a folder"))

    @property
    def lake(self) -> Path:
        return self.root / "lake"

    @property
    def models(self) -> Path:
        return self.root / "models"

    @property
    def prefect_home(self) -> Path:
        return self.root / "prefect"
