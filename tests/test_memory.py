"""release_freed_memory hands a fragmented heap's free pages back (what a run calls between stages)."""

import ctypes
import sys

import pytest

from viewmill.memory import _malloc_trim, release_freed_memory


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


HOLD_200_MIB = "import sys; block = b'1' * (200 * 2**20); print('ready', flush=True); sys.stdin.read()"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's /proc")
def test_a_watch_counts_the_memory_of_the_processes_the_block_started():
    # Apertium translates in processes of its own (~190 MiB a direction): `viewmill plan` once
    # left them out of the augment stage's memory, 0.5 GiB under a full run's.
    import subprocess
    import time

    from viewmill.memory import Watch, rss_now, tree_rss

    with Watch() as watch:
        child = subprocess.Popen([sys.executable, "-c", HOLD_200_MIB], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        try:
            assert child.stdout.readline() == b"ready\n"
            assert tree_rss() - rss_now() > 190 * 2**20
            time.sleep(0.2)  # the watch samples every 20 ms
        finally:
            child.communicate(b"")
    assert watch.peak - rss_now() > 190 * 2**20
    assert tree_rss() - rss_now() < 20 * 2**20  # the child is gone
