"""An operator's day on a real Prefect server: `viewmill deploy RECIPE` registers deployments
that a plain process worker (started here, outside the repository) runs; the new snapshot's
event starts training on the second pool's worker; each run's logs and artifacts say what it
did. And stopping `viewmill serve` after `viewmill deploy` leaves the deployed schedule active."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from viewmill.pipelines.context import RunContext
from viewmill.pipelines.recipe import load_recipe
from viewmill.pipelines.run import run_recipe
from viewmill.pipelines.state import StatePaths
from viewmill.storage.lake import Lake
from viewmill.train.export import read_manifest

from tests.conftest import needs_apertium
from tests.integration.servers import client_env, prefect_server

pytestmark = [pytest.mark.slow, needs_apertium]
CLI = [sys.executable, "-m", "viewmill.pipelines.cli.app"]
PREFECT = [sys.executable, "-m", "prefect"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with prefect_server(tmp_path_factory.mktemp("operator-server")) as api:
        yield api


def _client(api: str):
    from prefect.client.orchestration import SyncPrefectClient

    return SyncPrefectClient(api)


def _deployment(api: str, name: str):
    with _client(api) as client:
        return client.read_deployment_by_name(name)


def _flow_runs(api: str, deployment_name: str) -> list:
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId

    deployment_id = _deployment(api, deployment_name).id
    with _client(api) as client:
        return client.read_flow_runs(deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id])))


def _logs(api: str, flow_run_id) -> str:
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.client.schemas.sorting import LogSort

    with _client(api) as client:
        found = client.read_logs(
            LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])), sort=LogSort.TIMESTAMP_ASC
        )
    return "\n".join(log.message for log in found)


def _artifacts(api: str, flow_run_id) -> dict:
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    with _client(api) as client:
        found = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
        )
    return {artifact.key: artifact for artifact in found}


def _run(args: list[str], env: dict, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    done = subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{args}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def _wait_run(api: str, deployment_name: str, snapshot: str, timeout_s: float = 180):
    """The flow run an automation makes for this snapshot's event (the server needs a moment)."""
    deadline = time.monotonic() + timeout_s
    while not (runs := [r for r in _flow_runs(api, deployment_name) if r.parameters.get("snapshot") == snapshot]):
        assert time.monotonic() < deadline, f"no flow run of {deployment_name} within {timeout_s:g} s"
        time.sleep(0.5)
    (run,) = runs
    return run


def _start_run(api: str, deployment_name: str):
    with _client(api) as client:
        return client.create_flow_run_from_deployment(_deployment(api, deployment_name).id)


def _read_run(api: str, flow_run_id):
    with _client(api) as client:
        return client.read_flow_run(flow_run_id)


def _work_once(pool: str, env: dict, cwd: Path) -> str:
    """A plain process worker (outside the repository) that runs what its pool has, then exits."""
    worker = _run([*PREFECT, "worker", "start", "--pool", pool, "--type", "process", "--run-once"], env, cwd, 900)
    return worker.stdout + worker.stderr


def test_deployments_run_on_a_plain_process_worker_and_their_runs_say_what_they_did(tmp_path, tiny_recipe, server):
    state, work, elsewhere = tmp_path / "state", tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir()
    elsewhere.mkdir()
    # Another configuration's views of the corpus are in the lake first: the run's artifact leaves them out.
    other = load_recipe(tiny_recipe, ["filters.max_length_ratio=2.5"])
    run_recipe(RunContext(other, StatePaths(state)), train=False, evaluate=False)
    env = client_env(tmp_path / "operator-home", server)
    deploy = [*CLI, "deploy", str(tiny_recipe), "--state-dir", str(state), "--workdir", str(work)]
    deployed = _run(deploy, env, elsewhere)
    assert "deployed viewmill-augment/tiny-nightly-augment" in deployed.stderr
    assert "deployed viewmill-train/tiny-train" in deployed.stderr
    assert "created work pool viewmill-gpu" in deployed.stderr

    started = _start_run(server, "viewmill-augment/tiny-nightly-augment")
    worker_output = _work_once("viewmill-cpu", env, elsewhere)
    augmented = _read_run(server, started.id)
    assert augmented.state.is_completed(), augmented.state
    snapshot = _check_augmentation(server, augmented.id, state, work)
    assert f"pairs snapshot {snapshot}" in worker_output, "the worker's own output says what the run made"

    # The snapshot's event made the training run, on the other pool.
    trained = _wait_run(server, "viewmill-train/tiny-train", snapshot)
    _work_once("viewmill-gpu", env, elsewhere)
    trained = _read_run(server, trained.id)
    assert trained.state.is_completed(), trained.state
    _check_training(server, trained.id, state, snapshot)


def _check_augmentation(api: str, flow_run_id, state: Path, work: Path) -> str:
    """The lake holds the run's rows and the run's logs and artifacts name them; returns the snapshot."""
    with Lake(state / "lake", read_only=True) as lake:
        run_id = lake.scalar("SELECT run_id FROM runs WHERE flow = 'prefect:viewmill-augment' AND status = 'succeeded'")
        assert lake.scalar("SELECT count(*) FROM views WHERE run_id = ?", [run_id]) == 40
        assert lake.scalar("SELECT count(*) FROM views") == 80
        made = lake.arrow("SELECT snapshot, n_pairs FROM snapshots WHERE run_id = ?", [run_id]).to_pylist()
    ((snapshot, n_pairs),) = [(row["snapshot"], row["n_pairs"]) for row in made]
    logs = _logs(api, flow_run_id)
    assert f"run {run_id}: " in logs and f"working directory {work}" in logs
    assert f"pairs snapshot {snapshot}: {n_pairs} pairs, created" in logs
    assert "augment bt_es: 20 views written, 0 reused" in logs and "augment bt_ca: 20 views written" in logs
    assert "ingest: corpus tiny version" in logs and "20 sentences (0 new); dropped: duplicates 1" in logs
    found = _artifacts(api, flow_run_id)
    views = json.loads(found["tiny-views"].data)
    assert sum(row["views"] for row in views) == 40, "the run's own views, not the lake's 80"
    assert sum(row["written_by_run"] for row in views) == 40
    assert {row["augmenter"] for row in views} == {"bt_es", "bt_ca"}
    assert run_id in found["tiny-views"].description and "tiny-training" not in found
    return snapshot


def _check_training(api: str, flow_run_id, state: Path, snapshot: str) -> None:
    with Lake(state / "lake", read_only=True) as lake:
        models = lake.arrow("SELECT model_id, path FROM models WHERE snapshot = ?", [snapshot]).to_pylist()
    ((model_id, path),) = [(row["model_id"], str(StatePaths(state).model_folder(row["path"]))) for row in models]
    selected = read_manifest(Path(path))["selected_step"]
    logs = _logs(api, flow_run_id)
    assert f"train: model {model_id[:12]} at {path} (trained 4 steps); selected step {selected}" in logs
    assert f"pairs snapshot {snapshot}: " in logs and "made earlier" in logs
    training = _artifacts(api, flow_run_id)["tiny-training"].data
    assert f"| path | {path} |" in training and f"| selected step | {selected} |" in training
    assert f"| pairs snapshot | {snapshot} (" in training and "| trained | in this run |" in training


def _wait_deployment(api: str, name: str, serving: subprocess.Popen, timeout_s: float = 300):
    from prefect.exceptions import ObjectNotFound

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return _deployment(api, name)
        except ObjectNotFound:
            assert serving.poll() is None, serving.communicate()[0][-3000:]
            assert time.monotonic() < deadline, f"viewmill serve did not register {name} within {timeout_s:g} s"
            time.sleep(0.5)


def test_stopping_serve_after_deploy_leaves_the_deployed_schedule_active(tmp_path, tiny_recipe, server):
    env = client_env(tmp_path / "operator-home", server)
    state = tmp_path / "state"
    serve = [*CLI, "serve", str(tiny_recipe), "--state-dir", str(state), "--cron", "0 3 * * *"]
    serving = subprocess.Popen(
        serve, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        _wait_deployment(server, "viewmill-augment/tiny-served-nightly-augment", serving)
        deployed = _run([*CLI, "deploy", str(tiny_recipe), "--state-dir", str(state)], env, tmp_path)
        rivals = "viewmill-augment/tiny-served-nightly-augment, viewmill-train/tiny-served-train are active too"
        assert f"warning: served deployments {rivals}" in deployed.stderr
        serving.send_signal(signal.SIGINT)  # the operator's Ctrl-C
        output = serving.communicate(timeout=120)[0]
    finally:
        if serving.poll() is None:
            serving.kill()
            serving.wait()
    assert "Pausing all deployments" in output
    assert _deployment(server, "viewmill-augment/tiny-served-nightly-augment").paused, "serve paused its own"
    nightly = _deployment(server, "viewmill-augment/tiny-nightly-augment")
    assert nightly.paused is False and [s.active for s in nightly.schedules] == [True]
    assert nightly.schedules[0].schedule.cron == "0 2 * * *" and nightly.work_pool_name == "viewmill-cpu"
    assert _deployment(server, "viewmill-train/tiny-train").paused is False
