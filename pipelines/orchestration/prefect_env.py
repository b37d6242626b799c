"""Which Prefect server a run talks to: the user's (PREFECT_API_URL, else the active profile
or Prefect settings file), else a temporary local server owned by the state directory."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from viewmill.pipelines.state import StatePaths

QUIET = {
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
    "TOKENIZERS_PARALLELISM": "false",
}


def configure_prefect(state: StatePaths) -> None:
    """Prefect's home under the state dir and telemetry off, for a run on no configured server.
    Must run before `prefect` is imported; settings the user set explicitly win."""
    state.prefect_home.mkdir(parents=True, exist_ok=True)
    for key, value in {"PREFECT_HOME": str(state.prefect_home), **QUIET}.items():
        os.environ.setdefault(key, value)


class PrefectServerError(RuntimeError):
    """The configured Prefect server cannot be reached, or the temporary one cannot be
    started; the message says what to do."""


def require_writable_home(home: Path) -> None:
    """The temporary server keeps its database, lock and record in `home`: refuse one that
    cannot be written before anything starts, rather than fail on its lock file."""
    try:
        home.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=home):
            pass
    except OSError as exc:
        raise PrefectServerError(
            f"the Prefect home {home} cannot be written ({exc.strerror}): the temporary Prefect server keeps its "
            "database, lock and record there; make it writable, or point --state-dir at a writable state "
            "directory, or set PREFECT_API_URL to a running server, or pass --no-prefect to run without Prefect"
        ) from None


@dataclass(frozen=True)
class PrefectTarget:
    url: str
    source: str  # where the URL came from, for the user: "PREFECT_API_URL", "profile 'team'", ...


def configured_server() -> PrefectTarget | None:
    """The server the user's Prefect settings name, read by Prefect's own loader (environment,
    then the active profile, then prefect.toml / pyproject.toml / .env); None when none does."""
    api = os.environ.get("PREFECT_API_URL")
    if api:
        return PrefectTarget(api, "PREFECT_API_URL")
    from prefect.settings import Settings

    settings = Settings()  # built now: prefect's cached "current settings" may predate PREFECT_HOME
    url = settings.api.url
    if not url:
        return None
    profiles = _read_profiles(settings.profiles_path)
    name = os.environ.get("PREFECT_PROFILE") or profiles.get("active") or "ephemeral"
    in_profile = "PREFECT_API_URL" in profiles.get("profiles", {}).get(name, {})
    return PrefectTarget(url, f"profile {name!r}" if in_profile else "Prefect's settings files")


def _read_profiles(path) -> dict:
    """Prefect's profiles.toml as written (a missing file is no profiles)."""
    import tomllib

    try:
        return tomllib.loads(path.read_text(encoding="utf-8")) if path else {}
    except FileNotFoundError:
        return {}


def check_prefect_server(target: PrefectTarget, timeout: float = 5.0) -> None:
    """A configured server must answer its health check."""
    from viewmill.pipelines.orchestration.local_server import healthy

    if not healthy(target.url, timeout=timeout):
        raise PrefectServerError(
            f"the Prefect server at {target.url} (from {target.source}) is unreachable: start it "
            "(prefect server start), fix or unset PREFECT_API_URL or the profile's PREFECT_API_URL "
            "(prefect profile use ephemeral), or pass --no-prefect to run locally without a server"
        )


def _refresh_prefect_settings() -> None:
    # Prefect froze its settings when it was imported: make it read the environment again.
    import sys

    if "prefect.context" in sys.modules:
        from prefect.context import refresh_global_settings_context

        refresh_global_settings_context()


def connect_prefect(state: StatePaths | None) -> str:
    """Point this process's Prefect at a server and return the line that says which.

    A configured server (environment, profile, settings file) must answer. With none, and a
    state directory, the state's temporary local server is reused or started and this process
    holds a lease on it; with neither (state None), PrefectServerError says how to get one."""
    for key, value in QUIET.items():
        os.environ.setdefault(key, value)
    target = configured_server()
    if target is not None:
        check_prefect_server(target)
        return f"Prefect: using server {target.url} from {target.source}"
    if state is None:
        raise PrefectServerError(
            "this command needs a Prefect server: start one (prefect server start, or "
            "docker compose -f docker/compose.yaml up) and set PREFECT_API_URL=http://host:4200/api "
            "(or PREFECT_API_URL in your Prefect profile)"
        )
    from viewmill.pipelines.orchestration import local_server

    require_writable_home(state.prefect_home)
    configure_prefect(state)
    try:
        server = local_server.ensure(state.prefect_home)
    except local_server.LocalServerError as exc:
        raise PrefectServerError(str(exc)) from None
    local_server.take_lease(state.prefect_home)
    os.environ["PREFECT_API_URL"] = server.url
    _refresh_prefect_settings()
    how = "started" if server.started else "reused"
    idle_min = int(os.environ.get(local_server.IDLE_ENV, local_server.DEFAULT_IDLE_S)) / 60
    return (
        f"Prefect: temporary local server at {server.url} ({how}; home {state.prefect_home}; "
        f"stops after {idle_min:g} idle minutes or with `viewmill server stop`)"
    )
