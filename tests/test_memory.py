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
