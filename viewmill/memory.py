"""This process's memory: freed heap handed back to the system between a run's stages, and
the resident set watched around a measured block (with the engines' processes it started)."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import os
import resource
import sys
import threading
import time


@functools.cache
def _malloc_trim():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    return getattr(libc, "malloc_trim", None)  # glibc only (musl and macOS return freed pages themselves)


JEMALLOC_ARENAS_ALL = 4096  # jemalloc 5's MALLCTL_ARENAS_ALL: "arena.4096.purge" purges every arena


@functools.cache
def _jemalloc_mallctl():
    """jemalloc's `mallctl` where the process runs on jemalloc (viewmill.allocator), else None."""
    mallctl = getattr(ctypes.CDLL(None), "mallctl", None)
    if mallctl is not None:
        mallctl.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    return mallctl


def release_freed_memory() -> None:
    """glibc keeps what a stage freed (DuckDB's sort buffers, pandas frames) in its arenas, so
    the next stage's allocations stack on top: at a million sentences that held ~350 MB through
    training. `malloc_trim(0)` returns the free pages. Arrow's buffers come from Arrow's own pool
    (mimalloc by default), which malloc_trim does not reach and which returns freed pages only
    when a later Arrow allocation happens to come after its purge delay: the pool is asked to
    hand them back too, where this process uses Arrow at all. On jemalloc, freed pages wait
    out its decay time (10 s) unless its arenas are purged, which they are."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
    mallctl = _jemalloc_mallctl()
    if mallctl is not None:
        mallctl(f"arena.{JEMALLOC_ARENAS_ALL}.purge".encode(), None, None, None, 0)
    arrow = sys.modules.get("pyarrow")
    if arrow is not None:
        arrow.default_memory_pool().release_unused()


def release_dropped_models() -> None:
    """A model's modules refer to each other, so a model a stage dropped is freed only when the
    cycle collector runs, and training would stack on it (0.06-0.24 GiB at 10k sentences of the
    full profile). One full collection, then `release_freed_memory`. Called only where a model
    was dropped: a full collection costs in proportion to every object the process holds."""
    gc.collect()
    release_freed_memory()


def rss_now() -> int:
    """This process's resident memory in bytes (Linux's /proc; elsewhere the peak so far)."""
    return _statm_rss("self") or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _children(pid: int) -> list[int]:
    """`pid`'s child processes, whichever of its threads started them (Linux's /proc)."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:  # it ended meanwhile
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as children:
                found += [int(child) for child in children.read().split()]
        except OSError:  # the thread ended meanwhile
            continue
    return found


def _statm_rss(pid: int | str) -> int:
    """A process's resident bytes from /proc; 0 where it cannot be read (ended, or not Linux)."""
    try:
        with open(f"/proc/{pid}/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # it ended meanwhile
        return 0


@functools.cache
def _sees_children() -> bool:
    """Whether this kernel lists a thread's children (CONFIG_PROC_CHILDREN; Linux's default)."""
    return os.path.exists(f"/proc/self/task/{os.getpid()}/children")


def tree_rss() -> int:
    """Resident memory of this process and every process under it, in bytes: a stage's real
    footprint where its engine runs in processes of its own (Apertium's pipelines: about 190 MiB
    a direction). Each process's RSS, so pages they share count once per process, as `ps` and
    psutil count them. Where the kernel lists no children (not Linux, or a kernel without
    CONFIG_PROC_CHILDREN), this process's alone."""
    if not _sees_children():
        return rss_now()
    total, seen, todo = rss_now(), {os.getpid()}, _children(os.getpid())
    while todo:
        pid = todo.pop()
        if pid in seen:  # a pid reused while we walked
            continue
        seen.add(pid)
        total += _statm_rss(pid)
        todo += _children(pid)
    return total


class Watch:
    """Seconds and peak resident memory of the block it wraps, this process's and its child
    processes' together: this process sampled every 20 ms, the processes under it every 200 ms
    (walking them costs about a millisecond with Apertium's pipelines running, 5% of a core
    at every sample; an engine's processes change slowly)."""

    CHILDREN_EVERY = 10  # samples between walks of the processes under this one

    def __init__(self) -> None:
        self.seconds = 0.0
        self.peak = tree_rss()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        children, tick = 0, 0
        while not self._done.wait(0.02):
            try:
                own = rss_now()
                if tick % self.CHILDREN_EVERY == 0:
                    children = tree_rss() - own
                self.peak = max(self.peak, own + children)
            except (OSError, ValueError):  # a /proc file read mid-change; the next sample counts
                pass
            tick += 1

    def __enter__(self) -> Watch:
        self._t0 = time.perf_counter()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self._t0
        self._done.set()
        self._thread.join()
        self.peak = max(self.peak, tree_rss())
