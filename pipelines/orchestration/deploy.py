"""A recipe's two deployments (nightly augmentation; training on each new pairs snapshot):
served from `viewmill serve`'s own process, or registered by `viewmill deploy` for process
workers; what they rely on on the server (the `gpu` tag's concurrency limit, the work pools);
and prefect.yaml, the Docker images' deployments."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

GPU_TAG = "gpu"
CPU_POOL = "viewmill-cpu"
GPU_POOL = "viewmill-gpu"
DEFAULT_CRON = "0 2 * * *"
AUGMENT_FLOW = "viewmill-augment"
TRAIN_FLOW = "viewmill-train"


class DeployError(RuntimeError):
    """Deployments cannot be made or applied; the message names the input and the fix."""


@dataclass(frozen=True)
class DeploymentNames:
    augment: str
    train: str

    def full(self) -> list[str]:
        """`flow/deployment`, how the server and `prefect deployment run` name them."""
        return [f"{AUGMENT_FLOW}/{self.augment}", f"{TRAIN_FLOW}/{self.train}"]


def names_for(recipe: str, *, served: bool) -> DeploymentNames:
    """serve's and deploy's names differ: a name is one deployment on the server, so deploy
    would take over served ones, and stopping serve pauses every deployment it served."""
    prefix = f"{recipe}-served" if served else recipe
    return DeploymentNames(f"{prefix}-nightly-augment", f"{prefix}-train")


@dataclass(frozen=True)
class Workers:
    """Where `viewmill deploy`'s runs go: work pools, and the flow run's working directory on
    the worker (None: a fresh temporary directory; the code is imported from the installed package)."""

    cpu_pool: str = CPU_POOL
    gpu_pool: str = GPU_POOL
    workdir: str | None = None


def recipe_deployments(
    recipe_path: Path | str, state_dir: Path | str, *, cron: str = DEFAULT_CRON, workers: Workers | None = None
) -> list[Any]:
    """The recipe's RunnerDeployments: nightly augmentation on `cron`, and training whenever
    augmentation of this recipe makes a new snapshot. Served (workers None) or for `workers`:
    those import the flows by module path, so any machine with viewmill installed runs them."""
    from prefect.deployments.runner import EntrypointType
    from prefect.events import DeploymentEventTrigger
    from viewmill.pipelines.orchestration.artifacts import SNAPSHOT_EVENT
    from viewmill.pipelines.orchestration.flows import augment_flow, train_flow
    from viewmill.pipelines.recipe import load_recipe

    recipe = load_recipe(recipe_path)
    names = names_for(recipe.name, served=workers is None)
    params = {"recipe_path": str(Path(recipe_path).resolve()), "state_dir": str(Path(state_dir).resolve())}
    on_new_pairs = DeploymentEventTrigger(
        name=f"{names.train}-on-new-pairs",
        expect={SNAPSHOT_EVENT},
        match={"viewmill.recipe": recipe.name},
        parameters={**params, "snapshot": "{{ event.payload.snapshot }}"},
    )
    cpu: dict[str, Any] = {}
    gpu: dict[str, Any] = {}
    if workers is not None:  # paused=False: a redeploy also resumes what a stopped serve paused
        job = {"job_variables": {"working_dir": workers.workdir}} if workers.workdir else {}
        common = {"entrypoint_type": EntrypointType.MODULE_PATH, "paused": False, **job}
        cpu, gpu = {**common, "work_pool_name": workers.cpu_pool}, {**common, "work_pool_name": workers.gpu_pool}
    nightly = augment_flow.to_deployment(
        name=names.augment, cron=cron, parameters=params, tags=["viewmill", "augment"],
        description=f"Ingest, augment and pair {recipe.name} on {cron}; a new snapshot triggers {names.train}.",
        **cpu,
    )  # fmt: skip
    training = train_flow.to_deployment(
        name=names.train, parameters=params, triggers=[on_new_pairs], tags=["viewmill", "train", GPU_TAG],
        description=f"Train {recipe.name} on each new pairs snapshot ({SNAPSHOT_EVENT}).", **gpu,
    )  # fmt: skip
    return [nightly, training]


def serve(deployments: list[Any], serving_now: Callable[[], None] = lambda: None) -> None:
    """Serve `deployments` from this process until Ctrl-C or SIGTERM (how systemd and Docker stop
    a service), then pause them, as `prefect.serve` does; `serving_now` is called once the runner
    has started.

    Prefect's runner handles SIGTERM by calling its async stop from inside its event loop without
    awaiting it ("coroutine 'Runner.astop' was never awaited") and exiting mid-loop. Here SIGTERM
    cancels the serving task, as asyncio's Ctrl-C handler does (not by raising SIGINT, which a
    process started in the background ignores), and the runner pauses its deployments as it
    unwinds; a SIGTERM that comes while they are being registered waits until the runner has started."""
    import asyncio

    from prefect.runner import Runner

    serving: list[asyncio.Task] = []
    stopping: list[bool] = []

    def stop(*_: Any) -> None:
        stopping.append(True)
        if runner.started:  # else `announce` stops it once started, so that it pauses what it registered
            serving[0].cancel()

    class StopsLikeCtrlC(Runner):
        def handle_sigterm(self, *args: Any, **kwargs: Any) -> None:  # installed by the runner as it starts
            stop()

    runner = StopsLikeCtrlC(pause_on_shutdown=True)
    signal.signal(signal.SIGTERM, stop)  # until the runner installs its own

    async def announce() -> None:
        while not runner.started:
            await asyncio.sleep(0.1)
        if stopping:
            serving[0].cancel()
        else:
            serving_now()

    async def until_stopped() -> None:
        serving.append(asyncio.current_task())
        announcing = asyncio.create_task(announce())
        try:
            await runner.start()
        finally:
            announcing.cancel()

    for deployment in deployments:
        runner.add_deployment(deployment)
    with contextlib.suppress(KeyboardInterrupt, asyncio.CancelledError):  # stopped as asked
        asyncio.run(until_stopped())


def register(deployments: list[Any]) -> list[str]:
    """Create or update the deployments on the server; returns their `flow/name`s."""
    for deployment in deployments:
        deployment.apply()
    return [f"{d.flow_name}/{d.name}" for d in deployments]


def active_rivals(recipe: str, *, served: bool) -> list[str]:
    """The other kind's deployments of this recipe that are not paused: with both active the
    recipe is augmented twice a night and trained twice on each snapshot."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    found = []
    with get_client(sync_client=True) as client:
        for name in names_for(recipe, served=not served).full():
            try:
                if not client.read_deployment_by_name(name).paused:
                    found.append(name)
            except ObjectNotFound:
                continue
    return found


def rival_warning(recipe: str, *, served: bool) -> str | None:
    """What to tell an operator about `active_rivals` (None when there are none)."""
    rivals = active_rivals(recipe, served=served)
    if not rivals:
        return None
    named = ", ".join(rivals)
    if served:
        return (
            f"warning: worker deployments {named} are active too: with workers running, {recipe} is augmented "
            "twice a night and trained twice per snapshot; pause them (prefect deployment pause NAME) or stop serving"
        )
    return (
        f"warning: served deployments {named} are active too: while `viewmill serve` runs, {recipe} is augmented "
        "twice a night and trained twice per snapshot; stop it (Ctrl-C: it pauses only its own deployments)"
    )


def ensure_gpu_limit(limit: int = 1) -> bool:
    """The server-side concurrency limit behind the `gpu` tag: created when missing (True),
    kept as the team set it when present (False)."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            client.read_concurrency_limit_by_tag(GPU_TAG)
            return False
        except ObjectNotFound:
            client.create_concurrency_limit(tag=GPU_TAG, concurrency_limit=limit)
            return True


def gpu_limit_step(limit: int = 1) -> dict[str, object]:
    """A prefect.yaml build step (`prefect deploy` runs it): the `gpu` limit exists afterwards."""
    created = ensure_gpu_limit(int(limit))
    print(f"gpu concurrency limit: {'created with ' + str(limit) if created else 'already set'}")
    return {"gpu_limit_created": created}


def ensure_work_pools(names: list[str], pool_type: str = "process") -> list[str]:
    """Create the work pools named that the server lacks (`pool_type`); returns the names
    created. Existing pools, of any type, are kept."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectNotFound

    created = []
    with get_client(sync_client=True) as client:
        for name in sorted(set(names)):
            try:
                client.read_work_pool(name)
            except ObjectNotFound:
                client.create_work_pool(WorkPoolCreate(name=name, type=pool_type))
                created.append(name)
    return created


def read_deployments(prefect_file: Path) -> list[dict]:
    try:
        spec = yaml.safe_load(prefect_file.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise DeployError(f"cannot read {prefect_file}: {exc}") from None
    deployments = spec.get("deployments") or []
    if not deployments:
        raise DeployError(f"{prefect_file} has no deployments: add a `deployments:` list (see prefect.yaml)")
    return deployments


def pools_of(deployments: list[dict]) -> list[str]:
    """The work pools prefect.yaml's deployments name."""
    return sorted({d["work_pool"]["name"] for d in deployments if (d.get("work_pool") or {}).get("name")})


def apply_prefect_yaml(prefect_file: Path, names: list[str] | None = None) -> None:
    """`prefect deploy` of the file's deployments (all, or `names`), from the file's folder so
    entrypoints resolve; Prefect's own output goes to the terminal."""
    command = [sys.executable, "-m", "prefect", "--no-prompt", "deploy", "--prefect-file", str(prefect_file)]
    command += [arg for name in names for arg in ("--name", name)] if names else ["--all"]
    done = subprocess.run(command, cwd=prefect_file.parent, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise DeployError(f"prefect deploy of {prefect_file} failed (exit {done.returncode}): see its output above")
