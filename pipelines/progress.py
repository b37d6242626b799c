"""Progress of long stages in one style everywhere, as the `advance(done, total)` callback the
library functions accept.

- On a terminal: a rich bar on stderr (stdout carries only results, so output can be piped).
- Anywhere else (a log file, a pipe, a container): plain lines on stderr, one when the work
  starts, one every VIEWMILL_PROGRESS_INTERVAL seconds (default 30) and one when it ends, so a
  log shows a 26-minute training moving instead of one bar drawn when it is over.
- Inside a Prefect flow or task run: the same lines through the run's logger, so a worker's log
  and the Prefect UI show them (Prefect's console handler prints them on stderr too).

Nothing is shown for a stage with nothing to do (a shard whose views are all cached).
"""

from __future__ import annotations

import logging
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

INTERVAL_ENV = "VIEWMILL_PROGRESS_INTERVAL"
DEFAULT_INTERVAL_S = 30.0

Advance = Callable[[int, int], None]
Emit = Callable[[str], None]


def progress_interval() -> float:
    """Seconds between plain progress lines: VIEWMILL_PROGRESS_INTERVAL, else 30."""
    raw = os.environ.get(INTERVAL_ENV, "").strip()
    if not raw:
        return DEFAULT_INTERVAL_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{INTERVAL_ENV}={raw!r} is not a number of seconds above 0: unset it, or set e.g. 30")
    return value


def quiet_library_bars() -> None:
    """transformers', the hub's and datasets' own tqdm bars ("Loading weights", downloads) off:
    viewmill's progress says what is happening, and tqdm writes walls of carriage returns into logs.
    A variable the user set wins."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # read when huggingface_hub is imported
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    if os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] != "1":
        return
    if sys.modules.get("transformers") is not None:  # already imported: it read the variable then
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    elif sys.modules.get("huggingface_hub") is not None:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()


def run_logger() -> logging.Logger | logging.LoggerAdapter | None:
    """The Prefect run's logger when this code runs inside a flow or task run, else None. Prefect
    is asked only when it is already imported: no run can be going on without it."""
    if sys.modules.get("prefect") is None:
        return None
    try:
        from prefect.exceptions import MissingContextError
        from prefect.logging import get_run_logger
    except ImportError:
        return None
    try:
        return get_run_logger()
    except MissingContextError:
        return None


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class PlainProgress:
    """Where a stage stands, as plain lines: `advance` records, `tick` (called by a timer)
    reports, `close` ends with one line. Safe to call from two threads."""

    def __init__(self, description: str, total: int | None, emit: Emit, clock: Callable[[], float] = time.monotonic):
        self.description, self.done, self.total = description, 0, total
        self._emit, self._clock = emit, clock
        self._started = clock()
        self._announced = False
        self._lock = threading.Lock()
        if total:
            self._announce()

    def _announce(self) -> None:
        self._announced = True
        todo = f"0/{self.total}" if self.total is not None else "total unknown"
        self._emit(f"{self.description}: started ({todo})")

    def advance(self, done: int, total: int | None) -> None:
        with self._lock:
            self.done, self.total = done, total
            if not self._announced and (total is None or total > 0):
                self._announce()

    def line(self) -> str:
        elapsed = self._clock() - self._started
        if not self.total:
            return f"{self.description}: {self.done} done, {_duration(elapsed)} elapsed"
        share = self.done / self.total
        left = f", about {_duration(elapsed / share - elapsed)} left" if 0 < share < 1 else ""
        return f"{self.description}: {self.done}/{self.total} ({share:.0%}), {_duration(elapsed)} elapsed{left}"

    def tick(self) -> None:
        with self._lock:
            if self._announced:
                self._emit(self.line())

    def close(self, failed: bool = False) -> None:
        with self._lock:
            if not self._announced:
                return  # nothing was to be done: nothing to say
            elapsed = _duration(self._clock() - self._started)
            count = f"{self.done}/{self.total}" if self.total is not None else str(self.done)
            if failed:
                self._emit(f"{self.description}: stopped at {count} after {elapsed}")
            else:
                self._emit(f"{self.description}: done, {count} in {elapsed}")


def _stderr_line(text: str) -> None:
    print(text, file=sys.stderr, flush=True)  # sys.stderr as it is now (a test may have swapped it)


@contextmanager
def plain_progress(description: str, total: int | None, emit: Emit, interval: float) -> Iterator[Advance]:
    """Plain lines for the block: a timer thread reports every `interval` seconds, also while
    one step takes long (a model loading, a slow batch)."""
    lines = PlainProgress(description, total, emit)
    stop = threading.Event()

    def report() -> None:
        while not stop.wait(interval):
            lines.tick()

    timer = threading.Thread(target=report, name=f"progress: {description}", daemon=True)
    timer.start()
    failed = True
    try:
        yield lines.advance
        failed = False
    finally:
        stop.set()
        timer.join()
        lines.close(failed=failed)


@contextmanager
def _rich_bar(description: str, total: int | None) -> Iterator[Advance]:
    """A bar on stderr, started once there is work (no 0/0 bar for a stage with nothing to do)."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TimeRemainingColumn())  # fmt: skip
    progress = Progress(*columns, console=Console(stderr=True), transient=False)
    task = None

    def advance(done: int, new_total: int | None) -> None:
        nonlocal task
        if task is None:
            if new_total == 0:
                return
            progress.start()
            task = progress.add_task(description, total=new_total)
        progress.update(task, completed=done, total=new_total)

    if total:
        advance(0, total)
    try:
        yield advance
    finally:
        if task is not None:
            progress.stop()


@contextmanager
def progress_bar(description: str, total: int | None = None) -> Iterator[Advance]:
    """Yields advance(done, total) for the block: a bar on a terminal, plain lines elsewhere
    (into the Prefect run's log inside a flow run)."""
    quiet_library_bars()  # a worker's flow run did not start at the CLI, which does this too
    logger = run_logger()
    if logger is None and sys.stderr.isatty():
        with _rich_bar(description, total) as advance:
            yield advance
        return
    emit = logger.info if logger is not None else _stderr_line
    with plain_progress(description, total, emit, progress_interval()) as advance:
        yield advance
