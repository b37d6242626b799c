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


def _rate(per_second: float, unit: str) -> str:
    """A throughput as people read it: "12 sentences/s", "0.45 steps/s", or for slow work "8.2 s/step"."""
    if per_second >= 10:
        return f"{per_second:.0f} {unit}/s"
    if per_second >= 0.5:
        return f"{per_second:.1f} {unit}/s"
    return f"{1 / per_second:.1f} s/{unit.removesuffix('s')}"


class PlainProgress:
    """Where a stage stands, as plain lines: `advance` records, `tick` (called by a timer)
    reports, `close` ends with one line. Safe to call from two threads.

    The estimate comes from the rate of the counted work alone: its clock starts at the first
    `advance` (a model loading before it is not counted) and stops during a `phase` (dev
    scoring between training steps), which gets lines of its own. No estimate before a rate exists.
    """

    def __init__(
        self, description: str, total: int | None, emit: Emit, clock: Callable[[], float] = time.monotonic,
        unit: str | None = None,
    ) -> None:  # fmt: skip
        self.description, self.done, self.total, self.unit = description, 0, total, unit
        self._emit, self._clock = emit, clock
        self._started = clock()
        self._announced = False
        self._lock = threading.Lock()
        self._first: tuple[float, int] | None = None  # (time, done) of the first advance
        self._rate_from: tuple[float, int] | None = None  # where the rate's clock starts: after a unit
        self._phases: list[tuple[float, float]] = []  # (start, end) of each phase that ended
        self._phase: str | None = None  # what the stage does outside the counted work, shown
        self._phase_title, self._phase_started = "", 0.0
        self._phase_shown = False
        if total:
            self._announce()

    def _announce(self) -> None:
        self._announced = True
        todo = f"0/{self.total}" if self.total is not None else "total unknown"
        self._emit(f"{self.description}: started ({todo})")

    def advance(self, done: int, total: int | None) -> None:
        with self._lock:
            if self._first is None:  # a first call with work done already ends a unit: the clock starts there
                self._first = (self._clock(), done)
                self._rate_from = self._first if done > 0 else None
            elif self._rate_from is None and done > self._first[1]:
                self._rate_from = (self._clock(), done)
            self.done, self.total = done, total
            if not self._announced and (total is None or total > 0):
                self._announce()

    __call__ = advance

    def doing(self, what: str) -> None:
        """Say what the stage does now ("loading model X", "scoring dev: stsb-dev 1/2"); until
        `done_doing`, its time is not counted in the rate and lines say it instead."""
        with self._lock:
            if self._phase is None:
                self._phase_title, self._phase_started, self._phase_shown = what, self._clock(), False
            self._phase = what

    def done_doing(self) -> None:
        """Back to the counted work; a phase that was long enough to be shown says it ended."""
        with self._lock:
            if self._phase is None:
                return
            now = self._clock()
            if self._phase_shown:
                self._emit(f"{self.description}: {self._phase_title}: done in {_duration(now - self._phase_started)}")
            self._phases.append((self._phase_started, now))
            self._phase = None

    def note(self, text: str) -> None:
        """One line that is a result, not a state (a dev evaluation's scores): always shown."""
        self._emit(f"{self.description}: {text}")

    @contextmanager
    def phase(self, what: str) -> Iterator[None]:
        """`doing(what)` for the block (`doing` inside it says where the phase stands)."""
        self.doing(what)
        try:
            yield
        finally:
            self.done_doing()

    def rate(self, since: tuple[float, int] | None = None) -> float | None:
        """Units of counted work per second from `since` (default: the first unit's end, so a first
        unit slowed by warm-up, a lazily loaded model, is left out), phases not counted; None
        before a unit was counted after it."""
        since = since or self._rate_from
        if since is None:
            return None
        now = self._clock()
        phases = [*self._phases, *([(self._phase_started, now)] if self._phase is not None else [])]
        working = now - since[0] - sum(max(0.0, end - max(start, since[0])) for start, end in phases)
        counted = self.done - since[1]
        return counted / working if counted > 0 and working > 0 else None

    def line(self) -> str:
        now = self._clock()
        elapsed = _duration(now - self._started)
        count = f"{self.done}/{self.total}" if self.total else f"{self.done} done"
        if self._phase is not None:
            self._phase_shown = True
            return f"{self.description}: {self._phase}, {_duration(now - self._phase_started)} so far ({count}, " \
                   f"{elapsed} elapsed)"  # fmt: skip
        rate = self.rate()
        parts = [f"{count} ({self.done / self.total:.0%})" if self.total else count, f"{elapsed} elapsed"]
        if rate is not None and self.unit:
            parts.append(_rate(rate, self.unit))
        if rate is not None and self.total and self.done < self.total:
            parts.append(f"about {_duration((self.total - self.done) / rate)} left")
        return f"{self.description}: {', '.join(parts)}"

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
                where = f" while {self._phase}" if self._phase is not None else ""
                self._emit(f"{self.description}: stopped at {count}{where} after {elapsed}")
                return
            rate = self.rate(self._first)  # the whole stage's throughput, warm-up included
            speed = f" ({_rate(rate, self.unit)})" if rate is not None and self.unit else ""
            self._emit(f"{self.description}: done, {count} in {elapsed}{speed}")


def _stderr_line(text: str) -> None:
    print(text, file=sys.stderr, flush=True)  # sys.stderr as it is now (a test may have swapped it)


@contextmanager
def plain_progress(
    description: str, total: int | None, emit: Emit, interval: float, unit: str | None = None
) -> Iterator[PlainProgress]:
    """Plain lines for the block: a timer thread reports every `interval` seconds, also while
    one step takes long (a model loading, a slow batch)."""
    lines = PlainProgress(description, total, emit, unit=unit)
    stop = threading.Event()

    def report() -> None:
        while not stop.wait(interval):
            lines.tick()

    timer = threading.Thread(target=report, name=f"progress: {description}", daemon=True)
    timer.start()
    failed = True
    try:
        yield lines
        failed = False
    finally:
        stop.set()
        timer.join()
        lines.close(failed=failed)


class _RichProgress:
    """The bar's side of PlainProgress's interface: `advance` (also as a call), and `doing`,
    shown after the description; a bar starts once there is work (no 0/0 bar)."""

    def __init__(self, description: str, unit: str | None) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TextColumn("{task.fields[speed]}")]  # fmt: skip
        self.bar = Progress(*columns, console=Console(stderr=True), transient=False)
        self.description, self.unit = description, unit
        self.task = None
        self.plain = PlainProgress(description, None, lambda _: None, unit=unit)  # the rate and estimate

    def show(self, total: int | None) -> None:
        """The bar, before any work is counted (the rate's clock starts at the first advance)."""
        self.bar.start()
        self.task = self.bar.add_task(self.description, total=total, speed="")

    def advance(self, done: int, total: int | None) -> None:
        if self.task is None:
            if total == 0:
                return
            self.show(total)
        self.plain.advance(done, total)
        rate = self.plain.rate()
        speed = [_rate(rate, self.unit)] if rate is not None and self.unit else []
        if rate is not None and total and done < total:
            speed.append(f"about {_duration((total - done) / rate)} left")
        self.bar.update(self.task, completed=done, total=total, speed=", ".join(speed))

    __call__ = advance

    def doing(self, what: str) -> None:
        self.plain.doing(what)
        if self.task is not None:
            self.bar.update(self.task, description=f"{self.description}: {what}")

    def done_doing(self) -> None:
        self.plain.done_doing()
        if self.task is not None:
            self.bar.update(self.task, description=self.description)

    @property
    def done(self) -> int:
        return self.plain.done

    def note(self, text: str) -> None:
        self.bar.console.print(f"{self.description}: {text}", highlight=False)

    phase = PlainProgress.phase


@contextmanager
def _rich_bar(description: str, total: int | None, unit: str | None) -> Iterator[_RichProgress]:
    progress = _RichProgress(description, unit)
    if total:
        progress.show(total)
    try:
        yield progress
    finally:
        if progress.task is not None:
            progress.bar.stop()


@contextmanager
def progress_bar(description: str, total: int | None = None, unit: str | None = None) -> Iterator[PlainProgress]:
    """Yields the stage's progress for the block: call it as advance(done, total), and say what
    it does outside the counted work with `phase(what)` / `doing(what)`. `unit` ("steps",
    "sentences") adds the throughput. A bar on a terminal, plain lines elsewhere (into the
    Prefect run's log inside a flow run)."""
    quiet_library_bars()  # a worker's flow run did not start at the CLI, which does this too
    logger = run_logger()
    if logger is None and sys.stderr.isatty():
        with _rich_bar(description, total, unit) as bar:
            yield bar  # type: ignore[misc]  # the same interface
        return
    emit = logger.info if logger is not None else _stderr_line
    with plain_progress(description, total, emit, progress_interval(), unit) as lines:
        yield lines
