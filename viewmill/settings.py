"""viewmill's settings: one typed object, read from VIEWMILL_* variables once where a process
starts (the CLI, a Prefect worker's flow run) and then passed explicitly.

Nothing below this module reads these variables: a run's stages, lakes and task runners
see only the Settings they are given.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_STATE = ".viewmill"


class Settings(BaseSettings):
    """Where state lives and how a run reaches shared services."""

    model_config = SettingsConfigDict(env_prefix="VIEWMILL_", extra="ignore", frozen=True)

    state_dir: Path = Field(
        Path(DEFAULT_STATE),
        validation_alias=AliasChoices("state_dir", "VIEWMILL_STATE_DIR", "VIEWMILL_HOME"),
        description="state directory: lake, models, Prefect home ($VIEWMILL_HOME)",
    )
    catalog: SecretStr | None = Field(
        None,
        description="lake catalog: sqlite[:PATH] (default), duckdb[:PATH] or postgres:'dbname=... password=...' "
        "(secret: it may hold a password)",
    )
    data_path: str | None = Field(None, description="lake data files: a folder or s3:// URL (default <lake>/data)")
    results: str | None = Field(None, description="where shard task results persist: a folder or a URL")
    dask: str | None = Field(None, description="Dask cluster for augmentation shards: tcp://host:8786 or local:N")

    def catalog_spec(self) -> str | None:
        """The catalog string for `Lake` (the only place the secret is read)."""
        return self.catalog.get_secret_value() if self.catalog is not None else None

    def with_overrides(self, **values: object) -> Settings:
        """A copy with the given non-None values (command-line flags win over the environment)."""
        chosen = {key: value for key, value in values.items() if value is not None}
        if isinstance(chosen.get("catalog"), str):
            chosen["catalog"] = SecretStr(chosen["catalog"])
        if "state_dir" in chosen:
            chosen["state_dir"] = Path(chosen["state_dir"])
        return self.model_copy(update=chosen) if chosen else self

    @property
    def state_root(self) -> Path:
        return self.state_dir.expanduser().resolve()
