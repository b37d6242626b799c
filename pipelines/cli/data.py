"""`viewmill data list` and `viewmill data fetch NAME|all`: the public data sets recipes read."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from viewmill.storage.datasets import fetching
from viewmill.storage.datasets.sources import BY_FOLDER, BY_NAME, DATASETS, lookup

from viewmill.spelling import did_you_mean

data_app = typer.Typer(
    help="Public evaluation and training data sets: list them, fetch them into the data directory.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
console = Console(width=None if sys.stdout.isatty() else 240)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 240)

DataDir = Annotated[
    Path | None,
    typer.Option("--data-dir", help=f"data directory (default ${fetching.DATA_ENV} or ~/.cache/viewmill/data)"),
]


def _root(data_dir: Path | None) -> Path:
    if data_dir is not None:
        os.environ[fetching.DATA_ENV] = str(data_dir)  # recipes resolved later in this process agree
    return fetching.data_dir()


def _off_the_lake(root: Path) -> None:
    """Data sets never unpack into the lake of the state directory runs use ($VIEWMILL_HOME or ./.viewmill)."""
    from viewmill.pipelines.state import StatePaths
    from viewmill.storage.output_paths import OutputGuard

    from viewmill.settings import Settings

    settings = Settings()
    OutputGuard.at(StatePaths.resolve().lake, settings.catalog_spec(), settings.data_path).check(root)


@data_app.command("list")
def list_datasets(data_dir: DataDir = None) -> None:
    """The data sets, where recipes find them (data:<folder>/...), and whether they are fetched."""
    root = _root(data_dir)
    table = Table(show_lines=False)
    for column in ("name", "recipe path", "fetched", "what", "licence"):
        table.add_column(column, overflow="fold")
    for dataset in DATASETS:
        fetched = "yes" if fetching.is_fetched(dataset, root) else "no"
        if fetched == "no" and (fetching.shared_data_dir() / dataset.folder).is_dir():
            fetched = "no (../shared/data has it)"
        table.add_row(dataset.name, f"data:{dataset.folder}/", fetched, dataset.description, dataset.licence)
    console.print(table)
    console.print(f"data directory: {root}", highlight=False)


@data_app.command("fetch")
def fetch(
    names: Annotated[list[str], typer.Argument(help="data set names (viewmill data list), or all")],
    data_dir: DataDir = None,
    force: Annotated[bool, typer.Option(help="fetch again even when the data set is already there")] = False,
) -> None:
    """Download, verify (sha256) and unpack data sets into the data directory."""
    root = _root(data_dir)
    _off_the_lake(root)
    found = {name: lookup(name) for name in (list(BY_NAME) if names == ["all"] else names)}
    unknown = [name for name, dataset in found.items() if dataset is None]
    if unknown:
        known = [*BY_NAME, *BY_FOLDER]
        named = ", ".join(f"'{name}'{did_you_mean(name, known)}" for name in unknown)
        err_console.print(
            f"[bold red]error:[/] unknown data set {named}: choose from {', '.join(BY_NAME)} (or a data set's "
            "folder, as recipes write it: data:<folder>/...; viewmill data list shows both) or all",
            highlight=False,
        )
        raise typer.Exit(2)
    wanted = list(dict.fromkeys(dataset.name for dataset in found.values() if dataset is not None))
    failed = []
    for name in wanted:
        try:
            fetching.fetch(name, root=root, force=force, log=lambda line: console.print(line, highlight=False))
        except fetching.DataFetchError as exc:
            err_console.print(f"[bold red]error:[/] {name}: {exc}", highlight=False)
            failed.append(name)
    if failed:
        raise typer.Exit(1)
