"""Typer's usage-error panel (usage line, "Try ... for help.", the red Error box), drawn as
`typer.rich_utils.rich_format_error` draws it but without importing that module: it loads
rich's Markdown and traceback renderers (markdown-it, pygments, attrs), a fifth of a
usage error's 0.5 s budget (issue 33.7). tests/pipelines/cli/test_usage_errors.py compares
the two outputs, so a Typer upgrade that changes the panel fails there."""

from __future__ import annotations

import os

from rich.console import Console
from rich.highlighter import RegexHighlighter
from rich.markup import escape
from rich.panel import Panel
from rich.theme import Theme
from typer._click.exceptions import ClickException

# typer.rich_utils' styles and strings for this panel.
THEME = Theme(
    {"option": "bold cyan", "switch": "bold green", "negative_option": "bold magenta", "negative_switch": "bold red",
     "types": "bold yellow", "types_sep": "dim", "usage": "yellow"}
)  # fmt: skip
TRY_HELP = "Try [blue]'{command_path} {help_option}'[/] for help."


class OptionHighlighter(RegexHighlighter):
    """Options, switches, <types> and "Usage: ", as Typer highlights them."""

    highlights = (
        r"(^|\W)(?P<switch>\-\w+)(?![a-zA-Z0-9])",
        r"(^|\W)(?P<option>\-\-[\w\-]+)(?![a-zA-Z0-9])",
        r"(?P<types>\<[^\>]+\>)",
        r"(?P<usage>Usage: )",
    )


def _stderr_console(highlighter: OptionHighlighter) -> Console:
    # Typer's console: its environment variables for width and forced colours.
    width = os.getenv("TERMINAL_WIDTH")
    force = True if os.getenv("GITHUB_ACTIONS") or os.getenv("FORCE_COLOR") or os.getenv("PY_COLORS") else None
    if os.getenv("_TYPER_FORCE_DISABLE_TERMINAL"):
        force = False
    return Console(theme=THEME, highlighter=highlighter, color_system="auto", force_terminal=force,
                   width=int(width) if width else None, stderr=True)  # fmt: skip


def print_usage_error(error: ClickException) -> None:
    """The panel on stderr; nothing for the error that only follows a help page (no_args_is_help)."""
    if type(error).__name__ == "NoArgsIsHelpError":
        return
    highlighter = OptionHighlighter()
    console = _stderr_console(highlighter)
    ctx = getattr(error, "ctx", None)
    if ctx is not None:
        console.print(highlighter(ctx.get_usage()), style="bold")
        if ctx.command.get_help_option(ctx) is not None:
            try_help = TRY_HELP.format(command_path=escape(ctx.command_path), help_option=ctx.help_option_names[0])
            console.print(try_help, style="dim")
    console.print(Panel(highlighter(error.format_message()), border_style="red", title="Error", title_align="left"))
