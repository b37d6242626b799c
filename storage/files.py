"""Directories that appear whole or not at all."""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path


def user_cache_dir() -> Path:
    """viewmill's cache for converted models and prepared data ($XDG_CACHE_HOME/viewmill)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "viewmill"


def file_sha256(path: Path) -> str:
    """The hex sha256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def build_dir_atomically(target: Path, build: Callable[[Path], None], *, replace: bool = False) -> Path:
    """Run `build(staging)` on a sibling staging folder, then rename it to `target`.

    A reader never sees a half-written `target`, and a killed build leaves only its staging
    folder (`<target>.partial-<pid>`), which a later build by the same process id, or a
    caller holding the target's lock, clears. Without `replace`, a `target` that another
    process finished first is kept and this build is dropped; with it, the old `target` is
    renamed aside before the new one takes its place, then deleted.
    """
    staging = target.with_name(f"{target.name}.partial-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        build(staging)
        if replace and target.exists():
            _swap(staging, target)
            return target
        try:
            staging.rename(target)
        except OSError:
            if replace or not target.exists():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def clear_partials(target: Path) -> None:
    """Remove the staging folders killed builds of `target` left (`<target>.partial-<pid>`); only
    for a caller holding the target's lock, so no live build's folder is among them. A swap's
    `.partial-old-<pid>` is kept: it may be the only copy of the previous `target`."""
    for staging in target.parent.glob(f"{glob.escape(target.name)}.partial-[0-9]*"):
        shutil.rmtree(staging, ignore_errors=True)


def _swap(staging: Path, target: Path) -> None:
    old = target.with_name(f"{target.name}.partial-old-{os.getpid()}")
    shutil.rmtree(old, ignore_errors=True)
    target.rename(old)
    try:
        staging.rename(target)
    except OSError:
        old.rename(target)  # put the old one back rather than leave nothing
        raise
    shutil.rmtree(old, ignore_errors=True)
