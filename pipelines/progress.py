"""Progress bars for long stages (rich), as a callback the library functions accept.

Bars go to stderr: stdout carries only results, so a command's output can be piped."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


@contextmanager
def progress_bar(description: str, total: int | None = None) -> Iterator[Callable[[int, int], None]]:
    """Yields advance(done, total); the bar closes when the block ends."""
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=Console(stderr=True), transient=False) as progress:
        task = progress.add_task(description, total=total)

        def advance(done: int, new_total: int) -> None:
            progress.update(task, completed=done, total=new_total)

        yield advance
