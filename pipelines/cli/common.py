"""What every `viewmill` command shares: the consoles, the options (--state-dir, --catalog,
--set, --prefect, --dask), the settings they make, the exit statuses and the one-message failure.

It imports nothing heavy (no lake, recipe, torch or Prefect): every command loads it, and
`viewmill --version` loads little else.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from viewmill.pipelines.state import StatePaths

from viewmill.extras import missing_extra
from viewmill.paths import PathError, missing_recipe

if TYPE_CHECKING:
    from viewmill.storage.lake import Lake

    from viewmill.settings import Settings

# Results go to stdout (`console`); progress, status and errors to stderr (`err_console`),
# so `viewmill sql ... --format csv > out.csv` and pipes get the result and nothing else.
# Piped output is not cut to 80 columns: lake ids and texts must survive `| less` and logs.
console = Console(width=None if sys.stdout.isatty() else 240)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 240)

# Bad input: these end as one message and exit status 2. Named, not imported, so that starting a
# command loads none of their modules: an error can only come from a module already loaded, so
# sys.modules holds the class of any that can be raised.
USER_ERROR_NAMES = (
    ("viewmill.pipelines.recipe", "RecipeError"),
    ("viewmill.augment.ingest.readers", "CorpusError"),
    ("viewmill.augment.engines", "EngineError"),
    ("viewmill.storage.catalog", "LakeError"),
    ("viewmill.train.encoder", "EncoderError"),
    ("viewmill.train.evaluation.sts", "EvalDataError"),
    ("viewmill.pipelines.orchestration.prefect_env", "PrefectServerError"),
    ("viewmill.pipelines.cli.output_formats", "OutputError"),
    ("viewmill.extras", "MissingExtraError"),
    ("viewmill.train.manifest", "ExportError"),
    ("viewmill.paths", "PathError"),
    ("viewmill.pipelines.cli.common", "UsageError"),
)
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
DEBUG_ENV = "VIEWMILL_DEBUG"
EXIT_CODES = "Exit status: 0 ok, 1 a failed run, 2 usage or bad input. VIEWMILL_DEBUG=1 shows tracebacks."
# Every app (sub-apps too) takes -h as well as --help.
HELP = {"help_option_names": ["-h", "--help"]}


class UsageError(ValueError):
    """Options that do not go together, found before a command imports anything heavy."""


def require_recipe(path: Path) -> None:
    """Refuse a recipe path that names no file before a command loads the recipe schema (and
    torch with it, seconds): the loader's own words, at once."""
    problem = missing_recipe(path)
    if problem:
        raise PathError(problem)


def user_errors() -> tuple[type[Exception], ...]:
    """The bad-input error classes (USER_ERROR_NAMES) of the modules loaded so far: use as
    `except user_errors() as exc`, evaluated only when something was raised."""
    found = []
    for module_name, name in USER_ERROR_NAMES:
        module = sys.modules.get(module_name)
        if module is not None:
            found.append(getattr(module, name))
    return tuple(found)


RecipeArgument = Annotated[Path, typer.Argument(help="recipe YAML, e.g. recipes/demo.yaml")]
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
    from viewmill.settings import Settings

    return Settings().with_overrides(catalog=catalog, dask=dask)


def catalog_spec(catalog: str | None = None) -> str | None:
    """The catalog alone, as `load_settings(catalog).catalog_spec()` gives it (--catalog, else
    VIEWMILL_CATALOG in any case), for a command that needs no other setting: `viewmill sql`
    starts without pydantic-settings (0.1 s of imports)."""
    if catalog is not None:
        return catalog
    return {name.lower(): value for name, value in os.environ.items()}.get("viewmill_catalog")


def open_lake_read_only(state_dir: Path | None, catalog: str | None) -> Lake:
    from viewmill.storage.lake import open_lake  # not at the top: --version starts without pyarrow and DuckDB

    return open_lake(load_settings(catalog), StatePaths.resolve(state_dir).lake, read_only=True)


def _message(exc: Exception) -> str:
    pydantic_core = sys.modules.get("pydantic_core")
    if pydantic_core is not None and isinstance(exc, pydantic_core.ValidationError):
        from viewmill.pipelines.messages import validation_lines  # e.g. a VIEWMILL_* variable of the wrong form

        return "\n".join([f"{exc.title} is not valid:", *validation_lines(exc)])
    return str(exc)


def fail(exc: Exception, code: int = EXIT_USAGE) -> NoReturn:
    """One message on stderr, then exit: EXIT_USAGE for bad input, EXIT_FAILED for a run that failed."""
    missing = missing_extra(exc)
    if missing is not None:  # an optional package this install lacks: name the extra that brings it
        exc, code = missing, EXIT_USAGE
    known = isinstance(exc, (*user_errors(), ValueError))
    message = _message(exc) if known else f"{type(exc).__name__}: {exc}"
    if code == EXIT_FAILED:
        message = f"failed: {message} (VIEWMILL_DEBUG=1 shows the traceback)"
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, markup=True)
    raise typer.Exit(code)
