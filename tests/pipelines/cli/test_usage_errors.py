"""viewmill's usage-error panel is Typer's, character for character (colours too), without
importing typer.rich_utils in the process that shows it."""

import subprocess
import sys

import pytest
import typer.main
import typer.rich_utils
from typer._click.exceptions import ClickException
from viewmill.pipelines.cli.app import COMMANDS, app, load_command
from viewmill.pipelines.cli.usage_errors import print_usage_error


def _command_error(name: str, *args: str) -> ClickException:
    with pytest.raises(ClickException) as caught:
        load_command(name, COMMANDS[name]).main(list(args), prog_name=f"viewmill {name}", standalone_mode=False)
    return caught.value


def _group_error(*args: str) -> ClickException:
    group = typer.main.get_command(app)
    ctx = group.make_context("viewmill", list(args))
    with pytest.raises(ClickException) as caught:
        group.resolve_command(ctx, list(args))
    return caught.value


CASES = {
    "missing argument": lambda: _command_error("run"),
    "unknown option": lambda: _command_error("run", "r.yaml", "--bogus"),
    "bad value": lambda: _command_error("sql", "SELECT 1", "--max-rows", "0"),
    "unknown command": lambda: _group_error("rnu"),
}


@pytest.mark.parametrize("colour", [False, True], ids=["plain", "colour"])
@pytest.mark.parametrize("case", CASES)
def test_the_panel_is_typers(case, colour, capsys, monkeypatch):
    if colour:
        monkeypatch.setenv("FORCE_COLOR", "1")
        monkeypatch.setattr(typer.rich_utils, "FORCE_TERMINAL", True)
    error = CASES[case]()
    typer.rich_utils.rich_format_error(error)
    typers = capsys.readouterr().err
    print_usage_error(error)
    assert capsys.readouterr().err == typers
    assert ("\x1b[" in typers) == colour


def test_a_usage_error_does_not_load_typers_rich_utils(tmp_path):
    probe = "import sys; sys.argv = ['viewmill', 'run']\nfrom viewmill.pipelines.cli.app import app\ntry: app()\n" \
            "finally: print('typer.rich_utils' in sys.modules, file=sys.stderr)"  # fmt: skip
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "Missing argument 'recipe'" in done.stderr
    assert done.stderr.strip().endswith("False")
