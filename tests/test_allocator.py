"""The `viewmill` command starts itself again on jemalloc (viewmill.allocator), once, and a
setting this machine cannot honour is refused with the package to install."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import needs_apertium, write_round_trip_recipe
from viewmill.allocator import (
    ACTIVE_ENV,
    ALLOCATOR_ENV,
    LIBRARIES,
    AllocatorError,
    chosen_library,
    find_library,
    loaded_allocator,
    program_env,
    without_allocator,
)

JEMALLOC = find_library("jemalloc")
needs_jemalloc = pytest.mark.skipif(
    JEMALLOC is None or not sys.platform.startswith("linux"),
    reason="needs libjemalloc2 (./quickstart.sh installs it: apt-get install libjemalloc2)",
)


def _libraries(folder: Path, *names: str) -> list[Path]:
    for name in names:
        (folder / LIBRARIES[name]).write_bytes(b"")
    return [folder]


def test_auto_prefers_jemalloc_then_tcmalloc_then_glibc(tmp_path):
    assert chosen_library("auto", _libraries(tmp_path, "tcmalloc")) == tmp_path / LIBRARIES["tcmalloc"]
    assert chosen_library("", _libraries(tmp_path, "jemalloc")) == tmp_path / LIBRARIES["jemalloc"]
    assert chosen_library("auto", [tmp_path / "none"]) is None
    assert chosen_library("system", [tmp_path]) is None


def test_an_allocator_this_machine_lacks_is_refused_with_its_package(tmp_path):
    with pytest.raises(AllocatorError, match="apt-get install libtcmalloc-minimal4"):
        chosen_library("tcmalloc", [tmp_path])
    with pytest.raises(AllocatorError, match="no such library file"):
        chosen_library(str(tmp_path / "libmine.so"), [tmp_path])
    with pytest.raises(AllocatorError, match="unknown; one of auto, jemalloc, tcmalloc, system"):
        chosen_library("mimalloc", [tmp_path])
    library = tmp_path / "libmine.so"
    library.write_bytes(b"")
    assert chosen_library(str(library), []) == library


def test_the_loaded_allocator_is_read_from_the_process_maps(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text("7f0-7f1 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/libjemalloc.so.2\n")
    assert loaded_allocator(maps) == "jemalloc"
    maps.write_text("7f0-7f1 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6\n")
    assert loaded_allocator(maps) is None
    assert loaded_allocator(tmp_path / "absent") is None


def test_engines_get_the_environment_without_the_preloaded_allocator():
    env = {"LD_PRELOAD": "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2:/opt/libmine.so /usr/lib/libtcmalloc_minimal.so.4",
           "PATH": "/bin"}  # fmt: skip
    assert without_allocator(env) == {"LD_PRELOAD": "/opt/libmine.so", "PATH": "/bin"}
    assert without_allocator({"LD_PRELOAD": "/usr/local/lib/libjemalloc.so.2"}) == {}
    assert without_allocator({"PATH": "/bin"}) == {"PATH": "/bin"}


def test_programs_viewmill_starts_get_this_environment_without_the_allocator(monkeypatch):
    monkeypatch.setenv("LD_PRELOAD", "/usr/local/lib/libjemalloc.so.2")
    monkeypatch.setenv("VIEWMILL_PROBE", "kept")
    env = program_env()
    assert "LD_PRELOAD" not in env and env["VIEWMILL_PROBE"] == "kept"


RESTART = textwrap.dedent(
    """
    import os, sys
    from viewmill.allocator import allocator_label, restart_with_allocator
    print("start", os.getpid(), flush=True)
    restart_with_allocator()
    print(allocator_label(), os.getpid(), sys.argv[1:], os.environ.get("LD_PRELOAD", ""))
    """
)


def _unset_allocator_env() -> dict[str, str]:
    """This environment as a shell that never chose an allocator has it."""
    return {k: v for k, v in os.environ.items() if k not in (ACTIVE_ENV, ALLOCATOR_ENV, "LD_PRELOAD")}


def _restart(env_update: dict[str, str]) -> list[str]:
    env = _unset_allocator_env()
    out = subprocess.run([sys.executable, "-c", RESTART, "an argument"], env={**env, **env_update},
                         capture_output=True, text=True, check=True)  # fmt: skip
    return out.stdout.splitlines()


@needs_jemalloc
def test_a_process_restarts_once_on_jemalloc_with_its_arguments_and_pid():
    lines = _restart({})
    assert len([line for line in lines if line.startswith("start")]) == 2  # once before, once after the restart
    label, pid, *rest = lines[-1].split(" ", 2)
    assert label == "jemalloc" and pid == lines[0].split()[1] and "['an argument']" in rest[0]
    assert str(JEMALLOC) in rest[0]


@needs_jemalloc
def test_system_keeps_glibc_and_a_restarted_process_never_restarts_again():
    assert _restart({ALLOCATOR_ENV: "system"})[-1].startswith("glibc malloc")
    assert len(_restart({ALLOCATOR_ENV: "system"})) == 2  # no restart: one "start" line
    # A preload the loader ignored leaves glibc's malloc: the marker still stops a second restart.
    lines = _restart({ACTIVE_ENV: str(JEMALLOC)})
    assert len(lines) == 2 and lines[-1].startswith("glibc malloc")


def test_the_command_refuses_an_unknown_allocator_before_it_starts():
    viewmill = Path(sys.executable).with_name("viewmill")
    out = subprocess.run([str(viewmill), "--version"], env={**os.environ, ALLOCATOR_ENV: "mimalloc"},
                         capture_output=True, text=True)  # fmt: skip
    assert out.returncode == 2 and "VIEWMILL_ALLOCATOR=mimalloc: unknown" in out.stderr


@needs_jemalloc
@needs_apertium
def test_a_run_of_the_command_records_jemalloc_and_its_engines_inherit_it(tmp_path):
    recipe = write_round_trip_recipe(tmp_path, "alloc")
    viewmill = Path(sys.executable).with_name("viewmill")
    env = _unset_allocator_env()
    state = ["--state-dir", str(tmp_path / "state")]
    subprocess.run([str(viewmill), "run", str(recipe), "--no-prefect", *state], env=env, check=True,
                   capture_output=True, cwd=tmp_path)  # fmt: skip
    query = "SELECT json_extract_string(packages, '$.allocator') AS allocator FROM runs"
    out = subprocess.run([str(viewmill), "sql", query, "--format", "csv", *state], env=env, check=True,
                         capture_output=True, text=True)  # fmt: skip
    assert out.stdout.split() == ["allocator", "jemalloc"]
