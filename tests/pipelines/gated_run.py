"""A `viewmill` run held at its ingest gate (tests/slow_run.py), watched from other processes:
its `runs` row and `viewmill lake runs`, as any reader of the lake sees them mid-run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.slow_run import GATE_ENV

CLI = [sys.executable, "-m", "viewmill.pipelines.cli.app"]


def env_with(**extra: str) -> dict[str, str]:
    """This environment, `tests` importable, plus `extra`."""
    return {**os.environ, "PYTHONPATH": str(REPO), **extra}


@contextmanager
def gated_run(tmp_path: Path, args: list[str], env: dict[str, str]) -> Iterator[tuple[subprocess.Popen, Path]]:
    """`viewmill ARGS` with its ingest held at a gate: yields the process once the run waits
    there (its `running` row written), and the gate file to create to let it go on. A run
    still going on the way out (a failed check) is killed."""
    gate = tmp_path / "gate"
    run = subprocess.Popen(
        [sys.executable, "-m", "tests.slow_run", *args],
        env={**env, GATE_ENV: str(gate)}, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 600
        while not Path(f"{gate}.waiting").exists():
            if run.poll() is not None:
                pytest.fail(f"the run ended before ingest: {run.communicate()}")
            assert time.monotonic() < deadline, "the run did not reach ingest within 600 s"
            time.sleep(0.2)
        yield run, gate
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()


def let_finish(run: subprocess.Popen, gate: Path, timeout_s: float = 600) -> str:
    """Opens the gate and waits for the run to end; returns its stderr."""
    gate.touch()
    _, err = run.communicate(timeout=timeout_s)
    return err


def runs_rows(state: Path, env: dict[str, str], columns: str) -> list[dict]:
    """`viewmill sql` in its own process: what any reader of the lake sees now."""
    query = f"SELECT {columns} FROM runs ORDER BY started_at"
    out = subprocess.run([*CLI, "sql", query, "--state-dir", str(state), "--format", "json"],
                         env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def lake_runs(state: Path, env: dict[str, str]) -> str:
    out = subprocess.run([*CLI, "lake", "runs", "--state-dir", str(state)], env=env, capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    return out.stdout
