"""Real Prefect servers: a team server named only by a profile gets the runs and the
deployments (with the `gpu` limit); with none configured, runs share the state directory's
temporary server, which a SIGKILLed run leaves as the only server and the next run reuses."""

import os
import signal
import subprocess
import sys
import time
import uuid

import httpx
import psutil
import pytest
from viewmill.pipelines.orchestration import local_server

from tests.conftest import REPO, needs_apertium
from tests.integration.servers import prefect_server

pytestmark = pytest.mark.slow
CLI = [sys.executable, "-m", "viewmill.pipelines.cli.app"]


@pytest.fixture(scope="module")
def team_server(tmp_path_factory):
    """A plain `prefect server start` on loopback: the team's server."""
    with prefect_server(tmp_path_factory.mktemp("team-server")) as api:
        yield api


def _user_env(tmp_path, api: str) -> dict[str, str]:
    """A user whose Prefect profile (not the environment) points at `api`."""
    home = tmp_path / "user-prefect-home"
    home.mkdir()
    (home / "profiles.toml").write_text(f'active = "team"\n\n[profiles.team]\nPREFECT_API_URL = "{api}"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API_") and k != "PREFECT_PROFILE"}
    return {**env, "PREFECT_HOME": str(home)}


def _completed_flow_runs(api: str) -> list[str]:
    runs = httpx.post(f"{api}/flow_runs/filter", json={}, timeout=10).json()
    names = {f["id"]: f["name"] for f in httpx.post(f"{api}/flows/filter", json={}, timeout=10).json()}
    return sorted(names[r["flow_id"]] for r in runs if r["state"]["type"] == "COMPLETED")


@needs_apertium
def test_runs_reach_the_server_the_profile_names(tmp_path, tiny_recipe, team_server):
    state = tmp_path / "state"
    run = subprocess.run(
        [*CLI, "run", str(tiny_recipe), "--state-dir", str(state)],
        env=_user_env(tmp_path, team_server), capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert f"Prefect: using server {team_server} from profile 'team'" in run.stderr
    assert _completed_flow_runs(team_server) == ["viewmill-recipe"]
    assert not (state / "prefect" / "server.json").exists(), "no temporary server was started"


def test_deploy_applies_the_images_prefect_yaml_with_its_gpu_limit_and_pools(tmp_path, team_server):
    env = _user_env(tmp_path, team_server)
    deployed = subprocess.run([*CLI, "deploy", "--prefect-file", "prefect.yaml"], env=env, cwd=REPO,
                              capture_output=True, text=True, timeout=600)  # fmt: skip
    assert deployed.returncode == 0, deployed.stdout[-3000:] + deployed.stderr[-3000:]
    assert "created work pool viewmill-cpu" in deployed.stderr and "created with 1" in deployed.stderr
    found = httpx.post(f"{team_server}/deployments/filter", json={}, timeout=10).json()
    assert sorted(d["name"] for d in found) == ["demo-nightly-augment", "demo-train"]
    limit = httpx.get(f"{team_server}/concurrency_limits/tag/gpu", timeout=10).json()
    assert limit["concurrency_limit"] == 1
    pools = httpx.post(f"{team_server}/work_pools/filter", json={}, timeout=10).json()
    assert {p["name"]: p["type"] for p in pools} == {"viewmill-cpu": "process", "viewmill-gpu": "process"}

    # Plain `prefect deploy` of prefect.yaml restores the limit too: its build step runs viewmill's.
    assert httpx.delete(f"{team_server}/concurrency_limits/tag/gpu", timeout=10).status_code == 200
    plain = subprocess.run(
        [sys.executable, "-m", "prefect", "--no-prompt", "deploy", "--name", "demo-train"],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert plain.returncode == 0, plain.stdout[-3000:] + plain.stderr[-3000:]
    assert httpx.get(f"{team_server}/concurrency_limits/tag/gpu", timeout=10).json()["concurrency_limit"] == 1


def _marked(marker: str) -> list[int]:
    """Live processes carrying `marker` in their environment: whatever a run started."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get("VIEWMILL_TEST_MARK") == marker and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return sorted(found)


@needs_apertium
def test_a_sigkilled_run_leaves_only_the_reusable_server_and_the_next_run_reuses_it(tmp_path, tiny_recipe):
    state = tmp_path / "state"
    home = state / "prefect"
    marker = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API_") and k != "PREFECT_PROFILE"}
    env.update(VIEWMILL_TEST_MARK=marker, VIEWMILL_PREFECT_IDLE_S="1800")  # up between the runs, however slow
    args = [*CLI, "run", str(tiny_recipe), "--state-dir", str(state)]
    try:
        _kill_reuse_stop(args, env, marker, state)
    finally:  # a failed check leaves no server behind
        local_server.stop(home, force=True)


def _kill_reuse_stop(args: list[str], env: dict[str, str], marker: str, state) -> None:
    home = state / "prefect"
    first = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 400
    while not (home / "leases" / str(first.pid)).exists():  # connected to its server
        assert first.poll() is None and time.monotonic() < deadline, "the run ended before taking its lease"
        time.sleep(0.2)
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    server = local_server.read_record(home)
    assert server is not None and local_server.healthy(server.url)
    assert _marked(marker) == [server.pid], "the documented, reusable server is all the killed run left"

    second = subprocess.run(args, env=env, capture_output=True, text=True, timeout=900)
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"Prefect: temporary local server at {server.url} (reused" in second.stderr
    assert local_server.read_record(home) == server and _marked(marker) == [server.pid]
    assert _completed_flow_runs(server.url) == ["viewmill-recipe"]

    stopped = subprocess.run([*CLI, "server", "stop", "--state-dir", str(state)], env=env, capture_output=True,
                             text=True, timeout=120)  # fmt: skip
    assert stopped.returncode == 0 and f"stopped the temporary Prefect server at {server.url}" in stopped.stdout
    assert _marked(marker) == [] and local_server.read_record(home) is None


def test_a_hung_server_is_replaced_and_an_idle_one_stops_itself(tmp_path):
    home = tmp_path / "prefect"
    home.mkdir()
    (home / "server.json").write_text('{"url": "http://127.0.0.1:9/api", "pid": 999999999}')  # stale
    try:
        _hang_replace_idle(home)
    finally:  # a failed check leaves no server behind
        local_server.stop(home, force=True)


def _gone(pid: int) -> bool:
    return not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def _hang_replace_idle(home) -> None:
    hung = local_server.ensure(home, idle_s=3600)
    assert hung.started and hung.url != "http://127.0.0.1:9/api"
    os.kill(hung.pid, signal.SIGSTOP)  # alive, holds its port, answers nothing
    try:
        fresh = local_server.ensure(home, idle_s=3)
    finally:
        if not _gone(hung.pid):
            os.kill(hung.pid, signal.SIGKILL)
    assert fresh.started and fresh.pid != hung.pid
    assert local_server.read_record(home) == local_server.LocalServer(fresh.url, fresh.pid)
    assert _gone(hung.pid), "the hung server was ended, not left holding its port"
    deadline = time.monotonic() + 120  # no run holds a lease: it stops itself after 3 idle seconds
    while not _gone(fresh.pid):
        assert time.monotonic() < deadline, "the idle server did not stop itself"
        time.sleep(0.5)
    assert local_server.read_record(home) is None
