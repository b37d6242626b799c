"""The `viewmill` command line: the app, how a command ends (one message, an exit status),
which module holds each command, and the small commands (`eval`, `plugins`).

Each command's module is imported only when that command runs, or when help lists it, so
`viewmill --version` and `viewmill sql` start without torch, Prefect or the recipe schema
(benchmarks/cli_startup.py measures it). `run` holds the commands that run recipes,
`sql`, `lake` (+ `lake_admin`), `data`, `prefect`, `views`, `models` and `evaluate` the others.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import sys
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
import typer.main
from typer._click.exceptions import ClickException
from viewmill.pipelines.cli.common import (
    DEBUG_ENV,
    EXIT_CODES,
    EXIT_FAILED,
    EXIT_OK,
    HELP,
    CatalogOption,
    StateDir,
    console,
    fail,
    load_settings,
    user_errors,
)
from viewmill.pipelines.progress import progress_interval, quiet_library_bars

from viewmill import __version__

if TYPE_CHECKING:
    from typer._click import Command, Context, Parameter  # the click that typer vendors

# Every command, in the order help lists them: "module:attribute", a Typer sub-app or a function.
COMMANDS = {
    "run": "viewmill.pipelines.cli.run:run",
    "train": "viewmill.pipelines.cli.run:train",
    "sweep": "viewmill.pipelines.cli.run:sweep",
    "plan": "viewmill.pipelines.cli.plan:plan",
    "eval": "viewmill.pipelines.cli.app:eval_models",
    "sql": "viewmill.pipelines.cli.sql:sql",
    "views": "viewmill.pipelines.cli.views:views_app",
    "lake": "viewmill.pipelines.cli.lake:lake_app",
    "data": "viewmill.pipelines.cli.data:data_app",
    "models": "viewmill.pipelines.cli.models:models_app",
    "plugins": "viewmill.pipelines.cli.app:plugins",
    "server": "viewmill.pipelines.cli.prefect:server_app",
    "deploy": "viewmill.pipelines.cli.prefect:deploy",
    "serve": "viewmill.pipelines.cli.run:serve",
}

_LIST_ITEM = re.compile(r"\s*([-*]|\d+\.)\s")


def unwrap_help(text: str | None) -> str | None:
    """A docstring's paragraphs as single lines (help wraps them to the terminal; the source's
    line breaks would cut sentences in two). List items and \\b paragraphs keep their lines."""
    if not text:
        return text
    paragraphs = []
    for paragraph in text.split("\n\n"):
        lines = paragraph.split("\n")
        if paragraph.lstrip().startswith("\b"):
            paragraphs.append(paragraph)
            continue
        joined = [lines[0].strip()]
        for line in lines[1:]:
            if _LIST_ITEM.match(line):
                joined.append(line.strip())
            else:
                joined[-1] = f"{joined[-1]} {line.strip()}".strip()
        paragraphs.append("\n".join(joined))
    return "\n\n".join(paragraphs)


def _plain_flags(params: Iterable[Parameter]) -> None:
    # Typer labels every flag `<bool>` in help, as if it took a value: show flags bare.
    for param in params:
        if getattr(param, "is_flag", False):
            param.metavar = ""


def _tidy(command: Command) -> Command:
    """Help unwrapped and flags shown bare, on the command and everything under it."""
    command.help = unwrap_help(command.help)
    help_option = command.get_help_option(typer.Context(command, help_option_names=HELP["help_option_names"]))
    _plain_flags([*command.params, *([help_option] if help_option is not None else [])])
    for sub in getattr(command, "commands", {}).values():
        _tidy(sub)
    return command


def load_command(name: str, reference: str) -> Command:
    """The click command for COMMANDS[name], its module imported now."""
    module, _, attribute = reference.partition(":")
    target = getattr(importlib.import_module(module), attribute)
    if isinstance(target, typer.Typer):
        command: Command = typer.main.get_group(target)
    else:
        single = typer.Typer(context_settings=HELP, add_completion=False)
        single.command(name)(target)
        command = typer.main.get_command(single)
    command.name = name
    return _tidy(command)


class LazyCommands(MutableMapping[str, "Command"]):
    """The app's commands by name, each loaded on first use (`load_command`)."""

    def __init__(self, loaded: Mapping[str, Command], references: Mapping[str, str]) -> None:
        self._loaded = {name: _tidy(command) for name, command in loaded.items()}
        self._references = dict(references)
        self._order = list(dict.fromkeys([*references, *loaded]))

    def __getitem__(self, name: str) -> Command:
        if name not in self._loaded:
            if name not in self._references:
                raise KeyError(name)
            self._loaded[name] = load_command(name, self._references[name])
        return self._loaded[name]

    def __setitem__(self, name: str, command: Command) -> None:
        self._loaded[name] = command
        if name not in self._order:
            self._order.append(name)

    def __delitem__(self, name: str) -> None:
        self._loaded.pop(name, None)
        self._references.pop(name, None)
        self._order.remove(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._order)

    def __len__(self) -> int:
        return len(self._order)


class ViewmillGroup(typer.core.TyperGroup):
    """Commands load lazily (COMMANDS); whatever a command raises ends as one message on stderr
    and an exit status: 2 for bad input (common.py's user errors), 1 for anything else."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.commands = LazyCommands(self.commands, COMMANDS)

    def get_params(self, ctx: Context) -> list[Parameter]:
        params = super().get_params(ctx)  # --version, --help and Typer's completion options
        _plain_flags(params)
        return params

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except ClickException as exc:  # a command's usage error: Typer's panel, drawn without its rich_utils
            from viewmill.pipelines.cli.usage_errors import print_usage_error  # here: no cost to a command that runs

            print_usage_error(exc)
            raise typer.Exit(exc.exit_code) from None
        except (typer.Exit, typer.Abort, typer.exceptions.TyperException):  # help, Ctrl-C
            raise
        except BrokenPipeError:
            _closed_pipe()
        except user_errors() as exc:
            fail(exc)
        except Exception as exc:
            if os.environ.get(DEBUG_ENV):
                raise
            fail(exc, EXIT_FAILED)


def _closed_pipe() -> None:
    # The reader stopped early (`| head`): end quietly as Unix tools killed by SIGPIPE do (128 + 13),
    # with stdout on /dev/null so Python's flush at exit does not complain.
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    raise typer.Exit(141)


app = typer.Typer(
    help="viewmill: augmented view pairs for sentence-embedding learning.",
    epilog=EXIT_CODES,
    no_args_is_help=True,
    cls=ViewmillGroup,
    context_settings=HELP,
)


def _print_version(value: bool) -> None:
    if value:
        console.print(f"viewmill {__version__}", highlight=False)
        raise typer.Exit(EXIT_OK)


@app.callback()
def main(
    version: Annotated[
        bool, typer.Option("--version", callback=_print_version, is_eager=True, help="print the version and exit")
    ] = False,
) -> None:
    """viewmill: augmented view pairs for sentence-embedding learning."""
    try:
        progress_interval()  # a bad VIEWMILL_PROGRESS_INTERVAL is refused before any work
    except ValueError as exc:
        fail(exc)
    quiet_library_bars()  # libraries' own tqdm bars would interleave with viewmill's progress


def eval_models(
    models: Annotated[
        list[str], typer.Argument(help="model folders, model ids (viewmill models trained), embedded:NAME or hub ids")
    ],
    suite: Annotated[
        str, typer.Option(help="a standard suite (papers, multilingual) or a suite YAML file (tasks)")
    ] = "papers",
    baselines: Annotated[
        bool, typer.Option(help="add each model's untrained start with mean pooling and with [CLS]")
    ] = True,
    out: Annotated[Path | None, typer.Option(help="folder for the Markdown table and the plot")] = None,
    state_dir: StateDir = None,
    catalog: CatalogOption = None,
) -> None:
    """Evaluate models side by side: results go to the lake's evals, a Markdown table and a PNG plot."""
    from viewmill.pipelines.cli.evaluate import evaluate_cli, recorded_models
    from viewmill.pipelines.recipe import load_suite
    from viewmill.pipelines.state import StatePaths
    from viewmill.train.encoder import resolve_encoder

    state, settings = StatePaths.resolve(state_dir), load_settings(catalog)
    models = recorded_models(models, state, settings)  # a model id: its folder in this state
    for ref in models:  # the models named are checked first, then the suite
        resolve_encoder(ref)
    report = evaluate_cli(models, load_suite(suite), state, baselines=baselines, out=out, settings=settings)
    console.print(report.markdown, highlight=False, markup=False)
    for line in report.conventions:
        console.print(line, highlight=False, markup=False)
    console.print(f"table: {report.markdown_path}\nplot: {report.plot_path}", highlight=False)


def plugins() -> None:
    """List the names recipes can use: augmenter methods, engines, objectives, corpus formats and
    STS formats (viewmill's own, then installed plugins' from their entry points)."""
    from viewmill.augment.augmenters import AUGMENTERS
    from viewmill.augment.engines import ENGINES
    from viewmill.augment.ingest.readers import READERS
    from viewmill.train.evaluation.sts import STS_FORMATS
    from viewmill.train.objective_catalog import OBJECTIVES

    try:
        for registry in (AUGMENTERS, ENGINES, OBJECTIVES, READERS, STS_FORMATS):
            console.print(f"{registry.kind}s [{registry.group}]: {registry.help()}", highlight=False, markup=False)
    except ValueError as exc:  # a broken or clashing plugin
        fail(exc)


if __name__ == "__main__":
    app()
