"""What every `viewmill` command shares: the consoles, the options (--state-dir, --catalog,
--set, --prefect, --dask), the settings they make, the exit statuses and the one-message failure."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from viewmill.augment.engines import EngineError
from viewmill.augment.ingest import CorpusError
from viewmill.pipelines.output import OutputError
from viewmill.pipelines.prefect_env import PrefectServerError
from viewmill.pipelines.recipe import RecipeError
from viewmill.pipelines.state import StatePaths
from viewmill.storage.lake import Lake, LakeError
from viewmill.storage.settings import Settings
from viewmill.train.encoder import EncoderError
from viewmill.train.evaluate import EvalDataError
from viewmill.train.manifest import ExportError

from viewmill.extras import MissingExtraError, missing_extra

# Results go to stdout (`console`); progress, status and errors to stderr (`err_console`),
# so `viewmill sql ... --format csv > out.csv` and pipes get the result and nothing else.
# Piped output is not cut to 80 columns: lake ids and texts must survive `| less` and logs.
console = Console(width=None if sys.stdout.isatty() else 240)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 240)

USER_ERRORS = (
    RecipeError, CorpusError, EngineError, LakeError, EncoderError, EvalDataError, PrefectServerError, OutputError,
    MissingExtraError, ExportError,
)  # fmt: skip
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
DEBUG_ENV = "VIEWMILL_DEBUG"
EXIT_CODES = "Exit status: 0 ok, 1 a failed run, 2 usage or bad input. VIEWMILL_DEBUG=1 shows tracebacks."
# Every app (sub-apps too) takes -h as well as --help.
HELP = {"help_option_names": ["-h", "--help"]}

StateDir = Annotated[
    Path | None, typer.Option("--state-dir", help="state directory (default $VIEWMILL_HOME or ./.viewmill)")
]
CatalogOption = Annotated[
    str | None,
    typer.Option(
        "--catalog",
        help="lake catalog: sqlite (default), duckdb, or postgres:'dbname=... host=...' (default $VIEWMILL_CATALOG)",
    ),
]
Overrides = Annotated[
    list[str] | None, typer.Option("--set", help="override a recipe setting, e.g. --set train.objective=ntxent")
]
PrefectOption = Annotated[
    bool, typer.Option(help="run as a Prefect flow (your configured Prefect server, else a temporary local one)")
]

DaskOption = Annotated[
    str | None,
    typer.Option(
        "--dask",
        help="run augmentation shards on a Dask cluster: tcp://scheduler:8786, or local:N (default $VIEWMILL_DASK)",
    ),
]


def load_settings(catalog: str | None = None, dask: str | None = None) -> Settings:
    """VIEWMILL_* read once, flags winning; commands pass the result on explicitly."""
    return Settings().with_overrides(catalog=catalog, dask=dask)


def open_lake_read_only(state_dir: Path | None, catalog: str | None) -> Lake:
    return load_settings(catalog).open_lake(StatePaths.resolve(state_dir).lake, read_only=True)


def fail(exc: Exception, code: int = EXIT_USAGE) -> None:
    """One message on stderr, then exit: EXIT_USAGE for bad input, EXIT_FAILED for a run that failed."""
    missing = missing_extra(exc)
    if missing is not None:  # an optional package this install lacks: name the extra that brings it
        exc, code = missing, EXIT_USAGE
    known = isinstance(exc, (*USER_ERRORS, ValueError))
    message = str(exc) if known else f"{type(exc).__name__}: {exc}"
    if code == EXIT_FAILED:
        message = f"failed: {message} (VIEWMILL_DEBUG=1 shows the traceback)"
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, markup=True)
    raise typer.Exit(code)
