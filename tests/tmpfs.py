"""Small real disks for fault tests: a tmpfs of a given size (needs the right to mount:
root in the test container; the test skips elsewhere) and a way to fill one."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def tmpfs(where: Path, options: str) -> Iterator[Path]:
    """`where` as a tmpfs mounted with `options` (e.g. "size=4m" or "size=1m,ro"), unmounted after."""
    where.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs ({options}) here: {mounted.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=True)


def fill(filler: Path) -> None:
    """Take every free byte of the disk `filler` is on (unbuffered: close() has nothing left to flush)."""
    with filler.open("wb", buffering=0) as out:
        try:
            while True:
                out.write(b"\0" * 65536)
        except OSError:
            pass
