"""A real Prefect server on loopback, backed by a real PostgreSQL, a process worker, and a
deployment of the recipe flow run through it: the lake and the artifacts are checked."""

import os
import socket
import subprocess
import sys
import time

import httpx
import pytest
from viewmill.storage.lake import Lake

from tests.conftest import REPO, needs_apertium

pytestmark = [pytest.mark.slow, needs_apertium]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def prefect_on_postgres(tmp_path, postgres_dsn):
    import psycopg

    settings = dict(item.split("=", 1) for item in postgres_dsn.split())
    with psycopg.connect(postgres_dsn, autocommit=True) as connection:
        connection.execute("DROP DATABASE IF EXISTS prefect_it")
        connection.execute("CREATE DATABASE prefect_it")
    port = _port()
    env = {
        **os.environ,
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "PREFECT_API_DATABASE_CONNECTION_URL": (
            f"postgresql+asyncpg://{settings['user']}@{settings['host']}:{settings['port']}/prefect_it"
        ),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
    }
    env.pop("PREFECT_API_URL", None)
    prefect = [sys.executable, "-m", "prefect"]
    server = subprocess.Popen(
        [*prefect, "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )  # fmt: skip
    api = f"http://127.0.0.1:{port}/api"
    try:
        deadline = time.time() + 180
        while time.time() < deadline:
            try:
                if httpx.get(f"{api}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        else:
            pytest.fail("the Prefect server did not start within 180 s")
        yield api, {**env, "PREFECT_API_URL": api}
    finally:
        server.terminate()
        server.wait(timeout=60)


def test_a_deployment_runs_through_a_worker_and_fills_the_lake(tmp_path, tiny_recipe, prefect_on_postgres):
    api, env = prefect_on_postgres
    state_dir = tmp_path / "state"
    prefect = [sys.executable, "-m", "prefect"]
    subprocess.run([*prefect, "work-pool", "create", "viewmill-it", "--type", "process"], env=env, check=True,
                   capture_output=True)  # fmt: skip
    deploy = f"""
from viewmill.pipelines.orchestration.flows import recipe_flow
recipe_flow.from_source(source={str(REPO)!r}, entrypoint="pipelines/orchestration/flows.py:recipe_flow").deploy(
    name="it", work_pool_name="viewmill-it",
    parameters={{"recipe_path": {str(tiny_recipe)!r}, "state_dir": {str(state_dir)!r}}},
)
"""
    subprocess.run([sys.executable, "-c", deploy], env=env, check=True, capture_output=True, cwd=REPO)
    run = subprocess.run(
        [*prefect, "deployment", "run", "viewmill-recipe/it"], env=env, check=True, capture_output=True, text=True
    )
    assert "Created flow run" in run.stdout
    worker = subprocess.run(
        [*prefect, "worker", "start", "--pool", "viewmill-it", "--type", "process", "--run-once"],
        env=env, capture_output=True, text=True, timeout=600, cwd=REPO,
    )  # fmt: skip
    assert worker.returncode == 0, worker.stdout[-3000:] + worker.stderr[-3000:]

    runs = httpx.post(f"{api}/flow_runs/filter", json={}, timeout=10).json()
    assert [r["state"]["type"] for r in runs] == ["COMPLETED"], runs
    with Lake(state_dir / "lake", read_only=True) as lake:
        assert lake.scalar("SELECT count(*) FROM views") == 40
        assert lake.scalar("SELECT flow FROM runs") == "prefect:viewmill-recipe"
        assert lake.scalar("SELECT count(*) FROM models") == 1
    artifacts = httpx.post(f"{api}/artifacts/filter", json={}, timeout=10).json()
    assert {a["key"] for a in artifacts} >= {"tiny-views", "tiny-round-trips", "tiny-evals"}
