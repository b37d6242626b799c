"""On a real Prefect server: a flow run is named after its recipe and viewmill run id, and the
run's `runs` row, read by another process while the run waits mid-way, names that flow run;
`viewmill serve` stops on SIGTERM (a service manager's stop) as on Ctrl-C."""

import signal
import subprocess
import sys
import time
import uuid

import pytest

from tests.conftest import REPO, needs_apertium
from tests.integration.servers import client_env, prefect_server
from tests.pipelines.gated_run import gated_run, let_finish, runs_rows
from tests.pipelines.test_run_lineage import write_recipe

pytestmark = [pytest.mark.slow, needs_apertium]
CLI = [sys.executable, "-m", "viewmill.pipelines.cli.app"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with prefect_server(tmp_path_factory.mktemp("lineage-server")) as api:
        yield api


def _flow_run(api: str, flow_run_id: str):
    from prefect.client.orchestration import SyncPrefectClient

    with SyncPrefectClient(api) as client:
        return client.read_flow_run(uuid.UUID(flow_run_id))


def test_a_flow_run_is_named_after_its_recipe_and_run_id_and_its_row_names_it_mid_run(tmp_path, server):
    env = {**client_env(tmp_path / "home", server), "PYTHONPATH": str(REPO)}
    state = tmp_path / "state"
    with gated_run(tmp_path, ["run", str(write_recipe(tmp_path)), "--state-dir", str(state)], env) as (run, gate):
        (mid,) = runs_rows(state, env, "run_id, status, flow, flow_run_id, deployment, finished_at")
        assert (mid["status"], mid["flow"], mid["deployment"], mid["finished_at"]) == (
            "running", "prefect:viewmill-recipe", None, None,
        )  # fmt: skip
        flow_run = _flow_run(server, mid["flow_run_id"])
        assert flow_run.name == f"lineage-{mid['run_id']}"
        assert flow_run.state.is_running()
        err = let_finish(run, gate)
    assert run.returncode == 0, err
    (end,) = runs_rows(state, env, "run_id, status, flow_run_id")
    assert end == {"run_id": mid["run_id"], "status": "succeeded", "flow_run_id": mid["flow_run_id"]}
    assert _flow_run(server, mid["flow_run_id"]).state.is_completed()


def _wait_for(serving: subprocess.Popen, log, text: str, timeout_s: float = 300) -> None:
    """Wait until the process's stderr (written to `log`) holds `text`."""
    deadline = time.monotonic() + timeout_s
    while text not in log.read_text(encoding="utf-8"):
        assert serving.poll() is None, f"viewmill serve ended before {text!r}: {log.read_text(encoding='utf-8')}"
        assert time.monotonic() < deadline, f"no {text!r} within {timeout_s:g} s: {log.read_text(encoding='utf-8')}"
        time.sleep(0.5)


def test_serve_stops_on_sigterm_as_on_ctrl_c(tmp_path, server):
    env = client_env(tmp_path / "home", server)
    serve = [*CLI, "serve", str(write_recipe(tmp_path)), "--state-dir", str(tmp_path / "state")]
    log = tmp_path / "serve.err"
    with log.open("w", encoding="utf-8") as stderr:
        serving = subprocess.Popen(serve, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        _wait_for(serving, log, "Ctrl-C or SIGTERM stops and pauses them")
        sent = time.monotonic()
        serving.send_signal(signal.SIGTERM)  # as systemd and Docker stop a service
        serving.wait(timeout=60)
        took = time.monotonic() - sent
    finally:
        if serving.poll() is None:
            serving.kill()
            serving.wait()
    err = log.read_text(encoding="utf-8")
    assert serving.returncode == 0, err
    assert "never awaited" not in err and "Traceback" not in err, err
    assert "Pausing all deployments" in err and took < 30, (took, err)
    from prefect.client.orchestration import SyncPrefectClient

    with SyncPrefectClient(server) as client:
        served = client.read_deployment_by_name("viewmill-augment/lineage-served-nightly-augment")
    assert served.paused, "stopping serve pauses what it served"
