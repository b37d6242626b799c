"""How many sentences an augment shard commits at a time: what a kill can lose, against each
commit's lake work (a Parquet file, a catalog transaction, hashes recorded, the translation
cache's lookup), which is ~0.1 s on a new lake and grows with the lake's file count."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

Item = TypeVar("Item")

MIN_SENTENCES = 512  # the adaptive commit's floor: one batch of slow translation
# A fixed chunk where views depend on their batch, on a GPU: its engines keep getting faster up
# to ~1,000 sentences a batch (32,768 tokens, BENCHMARKS.md), so a chunk holds several batches;
# 512 kept an H200 at a quarter of that (issue 32.4). Still seconds of work per commit there.
GPU_FIXED_SENTENCES = 4096
# The meaning filter's fixed chunk on a CPU: the encoder sorts each call's texts by length, so
# larger calls pad less (8,192 texts in 2,048-text calls 1.21x faster than in 512s, BENCHMARKS.md),
# and a third of the commits. A kill loses seconds of filtered Apertium views.
MEANING_FIXED_SENTENCES = 2048
MAX_SENTENCES = 65_536  # its ceiling: a chunk's views are held in memory until they commit
WORK_PER_COMMIT_S = 1.0  # the adaptive commit's aim: about a second of work per commit
# ... and at most this share of it in the lake: a commit's lake work grows with the lake's files,
# so commits grow with it and the file count, hence each commit's cost, grows sub-linearly.
MAX_LAKE_SHARE = 0.1


@dataclass
class CommitSizes:
    """Cut a shard's sentences into commits: `fixed` sentences each when the recipe sets
    `execution.chunk_sentences`; unset, each commit holds about `WORK_PER_COMMIT_S` of work at
    the rate the last one ran (commit included), between MIN_ and MAX_SENTENCES, at most
    doubling from one commit to the next so a few fast sentences do not make a huge chunk.
    `lake_seconds` (a running total, e.g. `Lake.busy_seconds`) lets it also size each commit so
    that the lake's share of its time stays under MAX_LAKE_SHARE."""

    fixed: int | None = None
    clock: Callable[[], float] = time.monotonic
    lake_seconds: Callable[[], float] | None = None
    start: int = MIN_SENTENCES  # the first commit's size where sized by time (a size reached before)
    size: int = field(init=False)

    def __post_init__(self) -> None:
        if self.fixed is not None and self.fixed < 1:
            raise ValueError(f"sentences per commit must be at least 1, got {self.fixed}")
        self.size = self.fixed or max(MIN_SENTENCES, min(self.start, MAX_SENTENCES))

    def chunks(self, items: list[Item]) -> Iterator[list[Item]]:
        """`items` in consecutive chunks; the time until the next chunk is asked for (the work
        and the commit of this one) sets the next one's size."""
        start = 0
        while start < len(items):
            chunk = items[start : start + self.size]
            began, in_lake = self.clock(), self._lake_now()
            yield chunk
            self.record(len(chunk), self.clock() - began, self._lake_now() - in_lake)
            start += len(chunk)

    def _lake_now(self) -> float:
        return self.lake_seconds() if self.lake_seconds is not None else 0.0

    def record(self, sentences: int, seconds: float, lake_s: float = 0.0) -> None:
        """A chunk of `sentences` took `seconds` to make and commit, `lake_s` of them in the
        lake: size the next one."""
        if self.fixed is not None:
            return
        self.size = next_size(self.size, sentences, seconds, lake_s)


def next_size(size: int, sentences: int, seconds: float, lake_s: float) -> int:
    """The adaptive rule: about WORK_PER_COMMIT_S a commit, larger where the lake's share of the
    last one passed MAX_LAKE_SHARE (its lake work is mostly per commit, not per sentence)."""
    if seconds <= 0:
        return min(2 * size, MAX_SENTENCES)
    by_time = sentences / seconds * WORK_PER_COMMIT_S
    work = seconds - lake_s
    by_lake = MAX_SENTENCES if work <= 0 else sentences * lake_s / (MAX_LAKE_SHARE * work)
    return max(MIN_SENTENCES, min(round(max(by_time, by_lake)), 2 * size, MAX_SENTENCES))


def commits_for(
    sentences: int, per_sentence_s: float, commit_s: float, fixed: int | None = None, shards: int = 1
) -> int:
    """How many commits the rule makes of `sentences` in `shards` equal shards run one after
    another (each starting at the size the last reached), taking `per_sentence_s` each plus
    `commit_s` of lake work a commit: what `viewmill plan` expects of a run."""
    per_shard = -(-sentences // max(shards, 1))
    if fixed is not None:
        return shards * -(-per_shard // fixed)
    size, commits = MIN_SENTENCES, 0
    for _ in range(shards):
        done = 0
        while done < per_shard:
            chunk = min(size, per_shard - done)
            done, commits = done + chunk, commits + 1
            size = next_size(size, chunk, chunk * per_sentence_s + commit_s, commit_s)
    return commits


def on_gpu(*devices: str | None) -> bool:
    """Whether any of these torch device names (cpu, cuda, cuda:N, ...) is not the CPU."""
    return any(device is not None and device.split(":")[0] != "cpu" for device in devices)


def fixed_sentences(*devices: str | None, meaning: bool = False) -> int:
    """Sentences a fixed chunk holds where a chunk's make-up can change its views:
    `GPU_FIXED_SENTENCES` where the engine or the meaning filter runs on a GPU, else
    `MEANING_FIXED_SENTENCES` with the meaning filter (`meaning`), else `MIN_SENTENCES`."""
    if on_gpu(*devices):
        return GPU_FIXED_SENTENCES
    return MEANING_FIXED_SENTENCES if meaning else MIN_SENTENCES
