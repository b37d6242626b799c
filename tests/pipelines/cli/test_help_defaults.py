"""Every option's default is in its help (issue 33.6: `lake compact -h` and --keep-days)."""

from __future__ import annotations

import re

import typer.main
from typer.testing import CliRunner
from viewmill.pipelines.cli.app import app


def _commands(command, path: tuple[str, ...] = ("viewmill",)):
    yield path, command
    for name in getattr(command, "commands", {}):
        yield from _commands(command.commands[name], (*path, name))


def test_every_option_with_a_default_shows_it():
    hidden = []
    for path, command in _commands(typer.main.get_command(app)):
        for param in command.params:
            default = getattr(param, "default", None)
            if param.param_type_name != "option" or default in (None, False, (), []) or param.hidden:
                continue
            if not param.show_default and "default" not in (param.help or ""):
                hidden.append(f"{' '.join(path)} {param.opts[0]}")
    assert not hidden, f"options whose help hides their default: {hidden}"


def test_lake_compact_help_shows_how_many_days_it_keeps():
    result = CliRunner().invoke(app, ["lake", "compact", "-h"])
    flat = re.sub(r"[\s│]+", " ", result.output)  # the help as one line, without rich's box
    assert result.exit_code == 0
    keep = "--keep-days <float> keep DuckLake snapshots (time travel) this many days; pinned ones always [default: 7.0]"
    assert keep in flat, flat
