"""release_freed_memory hands a fragmented heap's free pages back (what a run calls between stages)."""

import ctypes
import gc
import os
import subprocess
import sys

import pytest

from viewmill.allocator import find_library
from viewmill.memory import _malloc_trim, release_freed_memory, rss_now


def _rss_mib() -> float:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS")) / 1024


@pytest.mark.skipif(not sys.platform.startswith("linux") or _malloc_trim() is None, reason="needs glibc's malloc_trim")
def test_free_pages_below_a_live_block_go_back_to_the_system():
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    blocks = [libc.malloc(4000) for _ in range(60_000)]  # ~240 MB in small blocks (below mmap's threshold)
    for block in blocks:
        ctypes.memset(block, 1, 4000)  # touched: resident
    for block in blocks[:-1]:  # the last one pins the heap's top: glibc's own trimming cannot shrink it
        libc.free(block)
    held = _rss_mib()
    release_freed_memory()
    assert held - _rss_mib() > 150, (held, _rss_mib())
    libc.free(blocks[-1])


def test_arrow_buffers_a_stage_freed_go_back_to_the_system():
    # Arrow allocates from its own pool (mimalloc by default), out of malloc_trim's reach: a
    # shuffled copy of a snapshot's texts stayed resident into training.
    import numpy as np
    import pyarrow as pa

    table = pa.table({"text": pa.array([f"sentence {i:07d} " * 8 for i in range(400_000)])})
    pa.default_memory_pool().release_unused()  # the builder's spare buffers, so the copy needs pages of its own
    before = rss_now()
    shuffled = table.take(pa.array(np.random.default_rng(0).permutation(len(table))))
    assert rss_now() - before > 40 * 2**20, "the copy is resident"
    del shuffled
    release_freed_memory()
    assert rss_now() - before < 15 * 2**20


JEMALLOC_FRAGMENTS = """
import ctypes
from viewmill.memory import release_freed_memory, rss_now
jemalloc = ctypes.CDLL(None)  # the preloaded jemalloc's malloc and free
jemalloc.malloc.restype, jemalloc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
jemalloc.free.argtypes = [ctypes.c_void_p]
blocks = [jemalloc.malloc(4000) for _ in range(60_000)]
for block in blocks:
    ctypes.memset(block, 1, 4000)
for block in blocks:
    jemalloc.free(block)
held = rss_now()
release_freed_memory()
print((held - rss_now()) / 2**20)
"""


@pytest.mark.skipif(find_library("jemalloc") is None, reason="needs libjemalloc2 (apt-get install libjemalloc2)")
def test_pages_jemalloc_freed_go_back_at_once_not_after_its_decay_time():
    # jemalloc returns freed pages after 10 s by default; a stage's next allocations would stack on them.
    env = {**os.environ, "LD_PRELOAD": str(find_library("jemalloc"))}
    out = subprocess.run([sys.executable, "-c", JEMALLOC_FRAGMENTS], env=env, capture_output=True, text=True,
                         check=True)  # fmt: skip
    assert float(out.stdout) > 150, out.stdout


HOLD_200_MIB = "import sys; block = b'1' * (200 * 2**20); print('ready', flush=True); sys.stdin.read()"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's /proc")
def test_a_watch_counts_the_processes_under_the_ones_a_thread_of_the_block_started():
    # Apertium translates in pipelines of its own (`bash -c "lt-proc ... | ..."`, ~190 MiB a
    # direction), started from whichever thread runs the engine: `viewmill plan` once left them
    # out of the augment stage's memory, 0.5 GiB under a full run's.
    import shlex
    import subprocess
    import threading
    import time

    from viewmill.memory import Watch, rss_now, tree_rss

    before = tree_rss() - rss_now()
    started: list[subprocess.Popen] = []
    checked = threading.Event()
    holder = f"{shlex.quote(sys.executable)} -c {shlex.quote(HOLD_200_MIB)} | cat"  # a grandchild holds it

    def start_and_stay() -> None:  # the thread lives on, so the shell stays its child, not the main thread's
        started.append(subprocess.Popen(["bash", "-c", holder], stdin=subprocess.PIPE, stdout=subprocess.PIPE))
        checked.wait(30)

    thread = threading.Thread(target=start_and_stay)
    with Watch() as watch:
        thread.start()
        while not started:
            time.sleep(0.01)
        shell = started[0]
        try:
            assert shell.stdout.readline() == b"ready\n"
            assert tree_rss() - rss_now() - before > 190 * 2**20
            time.sleep(0.5)  # the watch walks the processes under it every 200 ms
        finally:
            checked.set()
            thread.join()
            shell.communicate(b"")
    assert watch.peak - rss_now() - before > 190 * 2**20
    assert tree_rss() - rss_now() - before < 20 * 2**20  # the pipeline is gone


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's /proc")
def test_a_dropped_model_held_by_its_own_cycle_is_freed():
    from viewmill.memory import release_dropped_models

    class Module:  # as a model's modules refer to each other
        def __init__(self) -> None:
            self.weights = bytearray(b"1" * (200 * 2**20))
            self.parent = self

    was_enabled = gc.isenabled()
    gc.disable()  # no automatic collection may free it first
    try:
        before = rss_now()
        Module()  # dropped at once, held by its cycle
        assert rss_now() - before > 150 * 2**20
        release_dropped_models()
        assert rss_now() - before < 50 * 2**20
    finally:
        if was_enabled:
            gc.enable()
