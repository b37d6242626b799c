"""Prefect's environment for a local run: home under the state dir, no telemetry, ephemeral API."""

from __future__ import annotations

import os

from pipelines.state import StatePaths


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
