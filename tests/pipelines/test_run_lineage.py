"""A run's `runs` row, read from other processes: `running` as soon as the run starts, then how it
ended; a failed run's error; a SIGKILLed run stays `running` and `viewmill lake runs` says crashed."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, SENTENCES, needs_apertium
from tests.slow_run import FAIL_ENV, GATE_ENV

pytestmark = [needs_apertium]
CLI = [sys.executable, "-m", "viewmill.pipelines.cli.app"]


def write_recipe(folder: Path) -> Path:
    """Two Apertium round trips over 20 sentences, paired: no training (a quick run)."""
    (folder / "corpus.txt").write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    recipe = folder / "lineage.yaml"
    recipe.write_text(
        """
name: lineage
corpus: {format: text, files: [corpus.txt], min_words: 3}
augmenters:
  - {name: bt_es, method: backtranslation, engine: apertium, path: [en, es, en]}
  - {name: bt_ca, method: backtranslation, engine: apertium, path: [en, ca, en]}
filters: {min_chrf: 0, max_length_ratio: 3.0}
pair: {view_a: bt_es, view_b: bt_ca}
""",
        encoding="utf-8",
    )
    return recipe


def env_with(**extra: str) -> dict[str, str]:
    """This environment, `tests` importable, plus `extra`."""
    return {**os.environ, "PYTHONPATH": str(REPO), **extra}


def start_slow_run(tmp_path: Path, args: list[str], env: dict[str, str]) -> tuple[subprocess.Popen, Path]:
    """`viewmill ARGS` with its ingest held at a gate; returns the process once the run waits
    there (its `running` row written), and the gate file to create to let it go on."""
    gate = tmp_path / "gate"
    run = subprocess.Popen(
        [sys.executable, "-m", "tests.slow_run", *args],
        env={**env, GATE_ENV: str(gate)}, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 600
    while not Path(f"{gate}.waiting").exists():
        if run.poll() is not None:
            pytest.fail(f"the run ended before ingest: {run.communicate()}")
        assert time.monotonic() < deadline, "the run did not reach ingest within 600 s"
        time.sleep(0.2)
    return run, gate


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


def test_a_runs_row_is_running_mid_run_then_succeeded(tmp_path):
    state, env = tmp_path / "state", env_with()
    args = ["run", str(write_recipe(tmp_path)), "--no-prefect", "--state-dir", str(state)]
    run, gate = start_slow_run(tmp_path, args, env)
    try:
        (mid,) = runs_rows(state, env, "status, flow, flow_run_id, deployment, host, pid, finished_at, counts")
        assert mid == {"status": "running", "flow": "plain", "flow_run_id": None, "deployment": None,
                       "host": socket.gethostname(), "pid": run.pid, "finished_at": None, "counts": None}  # fmt: skip
        assert "running" in lake_runs(state, env)
        gate.touch()
        _, err = run.communicate(timeout=600)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 0, err
    columns = "status, error, finished_at IS NOT NULL AS ended, counts->>'$.sentences' AS n, typeof(timings) AS t"
    (end,) = runs_rows(state, env, columns)
    assert end == {"status": "succeeded", "error": None, "ended": True, "n": "20", "t": "JSON"}


def test_a_failed_run_says_failed_with_its_error(tmp_path):
    state, env = tmp_path / "state", env_with(**{FAIL_ENV: "the corpus server went away"})
    args = ["run", str(write_recipe(tmp_path)), "--no-prefect", "--state-dir", str(state)]
    run, gate = start_slow_run(tmp_path, args, env)
    gate.touch()
    _, err = run.communicate(timeout=300)
    message = "error: failed: RuntimeError: the corpus server went away (VIEWMILL_DEBUG=1 shows the traceback)"
    assert run.returncode == 1 and message in " ".join(err.split())
    (row,) = runs_rows(state, env, "status, error, finished_at IS NOT NULL AS ended")
    assert row == {"status": "failed", "error": "RuntimeError: the corpus server went away", "ended": True}
    assert "failed" in lake_runs(state, env)


def test_a_killed_run_stays_running_in_the_lake_and_is_shown_as_crashed(tmp_path):
    state, env = tmp_path / "state", env_with()
    args = ["run", str(write_recipe(tmp_path)), "--no-prefect", "--state-dir", str(state)]
    run, _ = start_slow_run(tmp_path, args, env)
    assert "running" in lake_runs(state, env)
    run.send_signal(signal.SIGKILL)
    run.communicate(timeout=60)
    (row,) = runs_rows(state, env, "status, pid, finished_at")
    assert row == {"status": "running", "pid": run.pid, "finished_at": None}, "nothing could record the end"
    shown = lake_runs(state, env)
    assert "crashed" in shown and "running" not in shown
