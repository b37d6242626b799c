"""Applying prefect.yaml's deployments to a server, with what they rely on there: the
concurrency limit behind the `gpu` tag and the work pools they name."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

GPU_TAG = "gpu"


class DeployError(RuntimeError):
    """prefect.yaml cannot be applied; the message names the file and the fix."""


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


def read_deployments(prefect_file: Path) -> list[dict]:
    try:
        spec = yaml.safe_load(prefect_file.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise DeployError(f"cannot read {prefect_file}: {exc}") from None
    deployments = spec.get("deployments") or []
    if not deployments:
        raise DeployError(f"{prefect_file} has no deployments: add a `deployments:` list (see prefect.yaml)")
    return deployments


def ensure_work_pools(deployments: list[dict], pool_type: str = "process") -> list[str]:
    """Create the work pools the deployments name that the server lacks (`pool_type`);
    returns the names created. Existing pools, of any type, are kept."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectNotFound

    names = sorted({d["work_pool"]["name"] for d in deployments if (d.get("work_pool") or {}).get("name")})
    created = []
    with get_client(sync_client=True) as client:
        for name in names:
            try:
                client.read_work_pool(name)
            except ObjectNotFound:
                client.create_work_pool(WorkPoolCreate(name=name, type=pool_type))
                created.append(name)
    return created


def apply_prefect_yaml(prefect_file: Path, names: list[str] | None = None) -> None:
    """`prefect deploy` of the file's deployments (all, or `names`), from the file's folder so
    entrypoints resolve; Prefect's own output goes to the terminal."""
    command = [sys.executable, "-m", "prefect", "--no-prompt", "deploy", "--prefect-file", str(prefect_file)]
    command += [arg for name in names for arg in ("--name", name)] if names else ["--all"]
    done = subprocess.run(command, cwd=prefect_file.parent, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise DeployError(f"prefect deploy of {prefect_file} failed (exit {done.returncode}): see its output above")
