"""How many sentences an augment shard commits at a time: what a kill can lose, against each
commit's fixed cost (a Parquet file, a catalog transaction, hashes recorded, ~0.1 s)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

Item = TypeVar("Item")

MIN_SENTENCES = 512  # the adaptive commit's floor: one batch of slow translation
MAX_SENTENCES = 65_536  # its ceiling: a chunk's views are held in memory until they commit
WORK_PER_COMMIT_S = 1.0  # the adaptive commit's aim: about a second of work per commit


@dataclass
class CommitSizes:
    """Cut a shard's sentences into commits: `fixed` sentences each when the recipe sets
    `execution.chunk_sentences`; unset, each commit holds about `WORK_PER_COMMIT_S` of work at
    the rate the last one ran (commit included), between MIN_ and MAX_SENTENCES, at most
    doubling from one commit to the next so a few fast sentences do not make a huge chunk."""

    fixed: int | None = None
    clock: Callable[[], float] = time.monotonic
    size: int = field(init=False)

    def __post_init__(self) -> None:
        if self.fixed is not None and self.fixed < 1:
            raise ValueError(f"sentences per commit must be at least 1, got {self.fixed}")
        self.size = self.fixed or MIN_SENTENCES

    def chunks(self, items: list[Item]) -> Iterator[list[Item]]:
        """`items` in consecutive chunks; the time until the next chunk is asked for (the work
        and the commit of this one) sets the next one's size."""
        start = 0
        while start < len(items):
            chunk = items[start : start + self.size]
            began = self.clock()
            yield chunk
            self.record(len(chunk), self.clock() - began)
            start += len(chunk)

    def record(self, sentences: int, seconds: float) -> None:
        """A chunk of `sentences` took `seconds` to make and commit: size the next one."""
        if self.fixed is not None:
            return
        affordable = MAX_SENTENCES if seconds <= 0 else int(sentences / seconds * WORK_PER_COMMIT_S)
        self.size = max(MIN_SENTENCES, min(affordable, 2 * self.size, MAX_SENTENCES))
