"""`viewmill server` (the state directory's temporary Prefect server) and `viewmill deploy` (a
recipe's deployments for process workers, or prefect.yaml's for the Docker images)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from viewmill.pipelines.cli.common import require_recipe
from viewmill.pipelines.state import StatePaths

from viewmill.paths import resolve_user_path

if TYPE_CHECKING:
    from viewmill.pipelines.orchestration.deploy import Workers

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
    from viewmill.pipelines.orchestration import local_server

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
    from viewmill.pipelines.orchestration import local_server
    from viewmill.pipelines.orchestration.prefect_env import PrefectServerError

    home = StatePaths.resolve(state_dir).prefect_home
    try:
        stopped = local_server.stop(home, force=force)
    except local_server.LocalServerError as exc:
        raise PrefectServerError(str(exc)) from None
    if stopped is None:
        typer.echo(f"no temporary Prefect server recorded for {home}")
    else:
        typer.echo(f"stopped the temporary Prefect server at {stopped.url} (pid {stopped.pid})")


RecipeToDeploy = Annotated[
    Path | None, typer.Argument(help="recipe YAML whose deployments to register, e.g. recipes/demo.yaml")
]
WorkersStateDir = Annotated[
    Path | None,
    typer.Option(
        "--state-dir",
        help="the runs' state directory, which every worker must see at this path "
        "(default $VIEWMILL_HOME or ./.viewmill, made absolute here)",
    ),
]
Workdir = Annotated[
    str | None, typer.Option(help="the flow runs' working directory on the workers (default: a temporary one)")
]
Cron = Annotated[str, typer.Option(help="augmentation schedule (cron, server time zone)")]
CpuPool = Annotated[str, typer.Option(help="work pool of the nightly augmentation")]
GpuPool = Annotated[str, typer.Option(help="work pool of training")]
PrefectFile = Annotated[
    Path | None, typer.Option(help="apply this prefect.yaml instead of a recipe (the Docker images' file)")
]
DeploymentNames = Annotated[list[str] | None, typer.Option("--name", help="with --prefect-file: only these")]
GpuLimit = Annotated[int, typer.Option(help="concurrency limit for the `gpu` tag, when missing")]
CreatePools = Annotated[bool, typer.Option(help="create missing work pools (type process)")]
DeployCatalog = Annotated[
    str | None,
    typer.Option(
        help="the runs' lake catalog: sqlite (default), duckdb or postgres:'dbname=... host=...' "
        "(set as VIEWMILL_CATALOG in the deployments' environment; no password: workers give it "
        "with PGPASSWORD or ~/.pgpass)"
    ),
]


def deploy(
    recipe: RecipeToDeploy = None,
    state_dir: WorkersStateDir = None,
    workdir: Workdir = None,
    cron: Cron = "0 2 * * *",
    cpu_pool: CpuPool = "viewmill-cpu",
    gpu_pool: GpuPool = "viewmill-gpu",
    prefect_file: PrefectFile = None,
    names: DeploymentNames = None,
    gpu_limit: GpuLimit = 1,
    create_pools: CreatePools = True,
    catalog: DeployCatalog = None,
) -> None:
    """Register a recipe's deployments on your Prefect server (PREFECT_API_URL or the active
    profile): nightly augmentation on --cpu-pool, training on each new pairs snapshot on --gpu-pool.
    Any process worker with viewmill installed runs them (prefect worker start --pool viewmill-cpu)."""
    if recipe is not None:
        require_recipe(recipe)  # before the recipe schema (and torch) loads
    from viewmill.pipelines.orchestration import deploy as deploying
    from viewmill.pipelines.orchestration.prefect_env import connect_prefect
    from viewmill.pipelines.recipe import load_recipe  # here, not at the top: it brings torch

    # Bad input is refused before any server is asked.
    env = _deployment_env(recipe, prefect_file, catalog, state_dir)
    if recipe is not None:
        recipe_name = load_recipe(recipe).name
        pools = [cpu_pool, gpu_pool]
    else:
        prefect_file = resolve_user_path(prefect_file, "--prefect-file", "point it at the prefect.yaml itself")
        pools = _prefect_file_pools(prefect_file)
    err_console.print(connect_prefect(None), highlight=False)
    _prepare_server(gpu_limit, pools, create_pools=create_pools)
    if recipe is None:
        deploying.apply_prefect_yaml(prefect_file, names)  # a failure exits 1 with Prefect's output above
        return
    # An absolute path: a relative one would name a folder under whatever the worker's cwd is.
    folder = str(resolve_user_path(workdir, "--workdir", "point it at a folder")) if workdir else None
    workers = deploying.Workers(cpu_pool, gpu_pool, folder)
    _register_recipe(recipe, recipe_name, StatePaths.resolve(state_dir).root, cron, workers, env)


def _deployment_env(
    recipe: Path | None, prefect_file: Path | None, catalog: str | None, state_dir: Path | None
) -> dict[str, str]:
    """The deployments' environment, once the choice of recipe or prefect.yaml is checked."""
    if (recipe is None) == (prefect_file is None):
        raise typer.BadParameter(
            "name a recipe (viewmill deploy recipes/demo.yaml: its deployments run on any process worker with "
            "viewmill installed), or --prefect-file prefect.yaml for the Docker images' deployments; not both",
            param_hint="RECIPE",
        )
    env = catalog_env(catalog, StatePaths.resolve(state_dir).root)
    if env and prefect_file is not None:
        raise typer.BadParameter(
            "prefect.yaml's deployments take their environment from its job_variables: set VIEWMILL_CATALOG "
            "there, or deploy a recipe", param_hint="--catalog",
        )  # fmt: skip
    return env


def _prefect_file_pools(prefect_file: Path) -> list[str]:
    from viewmill.pipelines.orchestration import deploy as deploying

    try:
        return deploying.pools_of(deploying.read_deployments(prefect_file))
    except deploying.DeployError as exc:
        raise typer.BadParameter(str(exc), param_hint="--prefect-file") from None


def _prepare_server(gpu_limit: int, pools: list[str], *, create_pools: bool) -> None:
    """The `gpu` concurrency limit, and (with `create_pools`) the missing work pools of `pools`."""
    from viewmill.pipelines.orchestration import deploy as deploying

    created = deploying.ensure_gpu_limit(gpu_limit)
    err_console.print(f"gpu concurrency limit: {'created with ' + str(gpu_limit) if created else 'already set'}")
    if create_pools:
        for name in deploying.ensure_work_pools(pools):
            err_console.print(f"created work pool {name} (type process)", highlight=False)


def _register_recipe(
    recipe: Path, recipe_name: str, state_root: Path, cron: str, workers: Workers, env: dict[str, str]
) -> None:
    from viewmill.pipelines.orchestration import deploy as deploying

    made = deploying.recipe_deployments(recipe, state_root, cron=cron, workers=workers)
    for deployment in made:
        deployment.job_variables = {**deployment.job_variables, **({"env": env} if env else {})}
    for name in deploying.register(made):
        err_console.print(f"deployed {name}", highlight=False)
    warning = deploying.rival_warning(recipe_name, served=False)
    if warning:
        err_console.print(warning, highlight=False)
    err_console.print(
        f"they run in {workers.workdir or 'a temporary directory'} on any process worker with viewmill installed: "
        f"prefect worker start --pool {workers.cpu_pool} --type process (and --pool {workers.gpu_pool} for training)",
        highlight=False,
    )


def catalog_env(catalog: str | None, state_root: Path) -> dict[str, str]:
    """The deployments' environment for `--catalog`: VIEWMILL_CATALOG, a file catalog's path made
    absolute (a worker runs elsewhere). A password is refused: a deployment's environment is stored
    on the Prefect server and shown in its UI."""
    if not catalog:
        return {}
    from viewmill.storage.catalog import CATALOG_ENV, Catalog, LakeError

    try:
        parsed = Catalog.parse(catalog, state_root / "lake")
    except LakeError as exc:
        raise typer.BadParameter(str(exc), param_hint="--catalog") from None
    if parsed.password is not None:
        raise typer.BadParameter(
            "the catalog holds a password, which the deployments would store on the Prefect server: drop it "
            "and give the workers PGPASSWORD or a ~/.pgpass", param_hint="--catalog",
        )  # fmt: skip
    if parsed.kind == "postgres":
        return {CATALOG_ENV: catalog}
    return {CATALOG_ENV: f"{parsed.kind}:{Path(parsed.target).expanduser().resolve()}"}
