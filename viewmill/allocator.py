"""The C allocator a `viewmill` process runs on: jemalloc where it is installed.

glibc's malloc keeps the heap a training step grew: each batch longer than any before it needs
larger activation buffers than the freed ones, so the heap grows at every new longest batch and
never shrinks. Training on a 1M-pair snapshot peaked at 2.53 GiB on glibc and 2.05 on jemalloc
(medians of 5 seeds), at 1.08x the step time (BENCHMARKS.md, "jemalloc"). An allocator is chosen
before the process starts (`LD_PRELOAD`), so the `viewmill` command starts itself again, once,
with it preloaded.

`VIEWMILL_ALLOCATOR`: `auto` (jemalloc, else tcmalloc, else glibc's), `jemalloc`, `tcmalloc`
(refused where not installed), `system` (glibc's), or a library's path.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import Mapping, Sequence
from pathlib import Path

ALLOCATOR_ENV = "VIEWMILL_ALLOCATOR"
ACTIVE_ENV = "VIEWMILL_ALLOCATOR_ACTIVE"  # set on the restart: a process starts itself again at most once
LIBRARIES = {"jemalloc": "libjemalloc.so.2", "tcmalloc": "libtcmalloc_minimal.so.4"}
PACKAGES = {"jemalloc": "libjemalloc2", "tcmalloc": "libtcmalloc-minimal4"}  # Debian and Ubuntu
CHOICES = ("auto", *LIBRARIES, "system")


class AllocatorError(ValueError):
    """VIEWMILL_ALLOCATOR names an allocator this machine does not have."""


def library_dirs() -> list[Path]:
    """Where Debian, Ubuntu and Fedora put shared libraries (multiarch first)."""
    arch = sysconfig.get_config_var("MULTIARCH") or ""
    found = [Path("/usr/lib") / arch, Path("/lib") / arch] if arch else []
    return [*found, Path("/usr/lib64"), Path("/usr/lib"), Path("/usr/local/lib")]


def find_library(name: str, dirs: Sequence[Path] | None = None) -> Path | None:
    """The installed library of allocator `name` (a key of LIBRARIES), or None."""
    for folder in library_dirs() if dirs is None else dirs:
        path = folder / LIBRARIES[name]
        if path.is_file():
            return path
    return None


def chosen_library(setting: str, dirs: Sequence[Path] | None = None) -> Path | None:
    """The library `setting` (VIEWMILL_ALLOCATOR's value) asks to preload; None for glibc's."""
    setting = setting.strip() or "auto"
    if setting == "system":
        return None
    if setting == "auto":
        return next((path for name in LIBRARIES if (path := find_library(name, dirs))), None)
    if setting in LIBRARIES:
        path = find_library(setting, dirs)
        if path is None:
            raise AllocatorError(
                f"{ALLOCATOR_ENV}={setting}, but {LIBRARIES[setting]} is not installed: "
                f"apt-get install {PACKAGES[setting]} (or set {ALLOCATOR_ENV}=auto or system)"
            )
        return path
    if "/" in setting:
        path = Path(setting)
        if not path.is_file():
            raise AllocatorError(
                f"{ALLOCATOR_ENV}={setting}: no such library file; a library's path, or one of {', '.join(CHOICES)}"
            )
        return path
    raise AllocatorError(f"{ALLOCATOR_ENV}={setting}: unknown; one of {', '.join(CHOICES)}, or a library's path")


def loaded_allocator(maps: Path = Path("/proc/self/maps")) -> str | None:
    """The allocator this process was started with ("jemalloc", "tcmalloc"), or None: glibc's
    (or not Linux)."""
    try:
        text = maps.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return next((name for name in LIBRARIES if f"/lib{name}" in text), None)


def without_allocator(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` with jemalloc and tcmalloc taken out of LD_PRELOAD: for programs that must run
    on their own allocator. Apertium's eng-cat pipeline throws std::bad_alloc on some sentences
    with jemalloc preloaded (2 of the tests' 20 sentences), and those views would be lost."""
    env = dict(environ)
    kept = [path for path in env.get("LD_PRELOAD", "").replace(" ", ":").split(":")
            if path and not any(Path(path).name.startswith(f"lib{name}") for name in LIBRARIES)]  # fmt: skip
    if kept:
        env["LD_PRELOAD"] = ":".join(kept)
    else:
        env.pop("LD_PRELOAD", None)
    return env


def program_env() -> dict[str, str]:
    """This process's environment for a program viewmill starts that is not viewmill's Python
    (Apertium, the DuckDB shell, git, dpkg-query): it runs on the allocator it was built and
    tested with, not the one `viewmill` preloaded for itself."""
    return without_allocator(os.environ)


def allocator_label() -> str:
    """What this process allocates with, for run records and benchmark headers."""
    return loaded_allocator() or "glibc malloc"


def restart_with_allocator(environ: Mapping[str, str] | None = None, argv: Sequence[str] | None = None) -> None:
    """Start this process again with the chosen allocator preloaded, unless it already runs on
    one, or a restart already happened, or the choice is glibc's. Returns only when it does not
    restart; raises AllocatorError for a setting this machine cannot honour."""
    environ = os.environ if environ is None else environ
    if not sys.platform.startswith("linux") or environ.get(ACTIVE_ENV) or loaded_allocator():
        return
    library = chosen_library(environ.get(ALLOCATOR_ENV, "auto"))
    if library is None:
        return
    env = dict(environ)
    env[ACTIVE_ENV] = str(library)
    env["LD_PRELOAD"] = ":".join(filter(None, [str(library), environ.get("LD_PRELOAD", "")]))
    argv = list(sys.orig_argv if argv is None else argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *argv[1:]], env)
