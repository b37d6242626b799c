"""A plain `prefect server start` on loopback (SQLite in its own home), as a team runs one."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from viewmill.pipelines.orchestration import local_server


def wait_healthy(api: str, process: subprocess.Popen, timeout_s: float = 240) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if local_server.healthy(api, timeout=2):
            return
        assert process.poll() is None, "the Prefect server exited"
        time.sleep(0.25)
    pytest.fail(f"the Prefect server did not start within {timeout_s:g} s")


def client_env(home: Path, api: str | None = None) -> dict[str, str]:
    """This environment without the user's Prefect API settings, a private PREFECT_HOME and
    telemetry off; PREFECT_API_URL=api when given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API_") and k != "PREFECT_PROFILE"}
    env.update(PREFECT_HOME=str(home), PREFECT_SERVER_ANALYTICS_ENABLED="false", DO_NOT_TRACK="1")
    if api:
        env["PREFECT_API_URL"] = api
    return env


@contextlib.contextmanager
def prefect_server(home: Path) -> Iterator[str]:
    """Start a server with its database under `home`; yields its API URL; stops it after."""
    port = local_server._free_port()
    local_server.seed_database(home)  # the session's migrated database, once a server wrote it
    server = subprocess.Popen(
        [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=client_env(home), stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )  # fmt: skip
    api = f"http://127.0.0.1:{port}/api"
    try:
        wait_healthy(api, server)
        local_server.save_template(home)  # before any client: the session's template, when none is yet
        yield api
    finally:
        server.terminate()
        server.wait(timeout=60)
