"""Prefect's environment for a local run: home under the state dir, no telemetry, ephemeral API."""

from __future__ import annotations

import os

from viewmill.pipelines.state import StatePaths


def configure_prefect(state: StatePaths) -> None:
    """Must run before `prefect` is imported; settings the user set explicitly win."""
    state.prefect_home.mkdir(parents=True, exist_ok=True)
    defaults = {
        "PREFECT_HOME": str(state.prefect_home),
        "DO_NOT_TRACK": "1",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
        "TOKENIZERS_PARALLELISM": "false",
    }
    for key, value in defaults.items():
        os.environ.setdefault(key, value)


class PrefectServerError(RuntimeError):
    """The configured Prefect server cannot be reached; the message says what to do."""


def check_prefect_server(timeout: float = 5.0) -> None:
    """With PREFECT_API_URL set, the server must answer its health check."""
    api = os.environ.get("PREFECT_API_URL")
    if not api:
        return
    import httpx

    try:
        httpx.get(api.rstrip("/") + "/health", timeout=timeout).raise_for_status()
    except httpx.HTTPError as exc:
        raise PrefectServerError(
            f"the Prefect server at {api} is unreachable ({type(exc).__name__}): start it (prefect server start), "
            "fix PREFECT_API_URL, or unset it (or pass --no-prefect) to run locally without a server"
        ) from None
