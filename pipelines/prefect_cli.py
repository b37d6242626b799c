"""`viewmill server` (the state directory's temporary Prefect server) and `viewmill deploy`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from viewmill.pipelines.state import StatePaths

err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 240)
server_app = typer.Typer(
    help="The temporary Prefect server a state directory's runs share.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
StateDir = Annotated[
    Path | None, typer.Option("--state-dir", help="state directory (default $VIEWMILL_HOME or ./.viewmill)")
]


@server_app.command("status")
def server_status(state_dir: StateDir = None) -> None:
    """Say whether this state directory's temporary server is up, where, and which runs use it."""
    from viewmill.pipelines import local_server

    home = StatePaths.resolve(state_dir).prefect_home
    record = local_server.read_record(home)
    if record is None or not local_server.healthy(record.url):
        typer.echo(f"no temporary Prefect server answers for {home}")
        return
    users = local_server.live_leases(home)
    typer.echo(f"temporary Prefect server at {record.url} (pid {record.pid}); runs using it: {len(users)}")


@server_app.command("stop")
def server_stop(
    state_dir: StateDir = None,
    force: Annotated[bool, typer.Option(help="stop it even while runs use it (they fail)")] = False,
) -> None:
    """Stop this state directory's temporary Prefect server (the next run starts a new one)."""
    from viewmill.pipelines import local_server
    from viewmill.pipelines.prefect_env import PrefectServerError

    home = StatePaths.resolve(state_dir).prefect_home
    try:
        stopped = local_server.stop(home, force=force)
    except local_server.LocalServerError as exc:
        raise PrefectServerError(str(exc)) from None
    if stopped is None:
        typer.echo(f"no temporary Prefect server recorded for {home}")
    else:
        typer.echo(f"stopped the temporary Prefect server at {stopped.url} (pid {stopped.pid})")


def deploy(
    prefect_file: Annotated[Path, typer.Option(help="the deployments file")] = Path("prefect.yaml"),
    names: Annotated[list[str] | None, typer.Option("--name", help="deploy only these (default: all)")] = None,
    gpu_limit: Annotated[int, typer.Option(help="concurrency limit for the `gpu` tag, when missing")] = 1,
    create_pools: Annotated[
        bool, typer.Option(help="create the work pools the file names that the server lacks (type process)")
    ] = True,
) -> None:
    """Apply prefect.yaml's deployments to your Prefect server (PREFECT_API_URL or the active
    profile), creating the `gpu` concurrency limit and missing work pools first."""
    from viewmill.pipelines import deploy as deploying
    from viewmill.pipelines.prefect_env import connect_prefect

    prefect_file = prefect_file.resolve()
    try:  # bad input is refused before any server is asked
        deployments = deploying.read_deployments(prefect_file)
    except deploying.DeployError as exc:
        raise typer.BadParameter(str(exc), param_hint="--prefect-file") from None
    err_console.print(connect_prefect(None), highlight=False)
    created = deploying.ensure_gpu_limit(gpu_limit)
    err_console.print(f"gpu concurrency limit: {'created with ' + str(gpu_limit) if created else 'already set'}")
    if create_pools:
        for name in deploying.ensure_work_pools(deployments):
            err_console.print(f"created work pool {name} (type process)", highlight=False)
    deploying.apply_prefect_yaml(prefect_file, names)  # a failure exits 1 with Prefect's output above
