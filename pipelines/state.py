"""Where a project's state lives: the lake, trained models and Prefect's home."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from viewmill.paths import PathError, resolve_user_path

STATE_ENV = "VIEWMILL_HOME"
STATE_ENV_ALIAS = "VIEWMILL_STATE_DIR"  # the settings' own name for it, honoured too
DEFAULT_STATE = ".viewmill"


@dataclass(frozen=True)
class StatePaths:
    root: Path

    @classmethod
    def resolve(cls, state_dir: Path | str | None = None) -> StatePaths:
        chosen = state_dir or _state_from_environment() or DEFAULT_STATE
        return cls(resolve_user_path(chosen, "state directory", f"point --state-dir (or {STATE_ENV}) at a folder"))

    @property
    def lake(self) -> Path:
        return self.root / "lake"

    @property
    def models(self) -> Path:
        return self.root / "models"

    def recorded(self, folder: Path) -> str:
        """How `models.path` records a model folder: relative to the state directory when it is
        inside it, so a copied or moved state names its own folder."""
        return folder.relative_to(self.root).as_posix() if folder.is_relative_to(self.root) else str(folder)

    def model_folder(self, recorded: str) -> Path:
        """A `models.path` as a folder of this state: a relative one from the state directory; an
        absolute one into a `models` folder (recorded before paths were relative, perhaps by the
        state this one was copied or moved from) as this state's folder of that name."""
        path = Path(recorded)
        if not path.is_absolute():
            return self.root / path
        return self.models / path.name if path.parent.name == "models" else path

    @property
    def prefect_home(self) -> Path:
        return self.root / "prefect"


def _state_from_environment() -> str | None:
    """$VIEWMILL_HOME, or $VIEWMILL_STATE_DIR; refused when both are set to different folders,
    rather than one of them silently ignored."""
    home, alias = os.environ.get(STATE_ENV), os.environ.get(STATE_ENV_ALIAS)
    if home and alias and Path(home).expanduser().resolve() != Path(alias).expanduser().resolve():
        raise PathError(
            f"{STATE_ENV} ({home}) and {STATE_ENV_ALIAS} ({alias}) name different state folders: unset one, "
            "or pass --state-dir"
        )
    return home or alias
