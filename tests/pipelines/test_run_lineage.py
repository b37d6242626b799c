"""A run's `runs` row, read from other processes: `running` as soon as the run starts, then how it
ended; a failed run's error; a SIGKILLed run stays `running` and `viewmill lake runs` says crashed."""

from __future__ import annotations

import signal
import socket
from pathlib import Path

from tests.conftest import needs_apertium, write_round_trip_recipe
from tests.pipelines.gated_run import env_with, gated_run, lake_runs, let_finish, runs_rows
from tests.slow_run import FAIL_ENV

pytestmark = [needs_apertium]


def write_recipe(folder: Path) -> Path:
    """Two Apertium round trips over 20 sentences, paired: no training (a quick run)."""
    return write_round_trip_recipe(folder, "lineage")


def test_a_runs_row_is_running_mid_run_then_succeeded(tmp_path):
    state, env = tmp_path / "state", env_with()
    args = ["run", str(write_recipe(tmp_path)), "--no-prefect", "--state-dir", str(state)]
    with gated_run(tmp_path, args, env) as (run, gate):
        (mid,) = runs_rows(state, env, "status, flow, flow_run_id, deployment, host, pid, finished_at, counts")
        assert mid == {"status": "running", "flow": "plain", "flow_run_id": None, "deployment": None,
                       "host": socket.gethostname(), "pid": run.pid, "finished_at": None, "counts": None}  # fmt: skip
        assert "running" in lake_runs(state, env)
        err = let_finish(run, gate)
    assert run.returncode == 0, err
    columns = "status, error, finished_at IS NOT NULL AS ended, counts->>'$.sentences' AS n, typeof(timings) AS t"
    (end,) = runs_rows(state, env, columns)
    assert end == {"status": "succeeded", "error": None, "ended": True, "n": "20", "t": "JSON"}


def test_a_failed_run_says_failed_with_its_error(tmp_path):
    state, env = tmp_path / "state", env_with(**{FAIL_ENV: "the corpus server went away"})
    args = ["run", str(write_recipe(tmp_path)), "--no-prefect", "--state-dir", str(state)]
    with gated_run(tmp_path, args, env) as (run, gate):
        err = let_finish(run, gate, timeout_s=300)
    message = "error: failed: RuntimeError: the corpus server went away (VIEWMILL_DEBUG=1 shows the traceback)"
    assert run.returncode == 1 and message in " ".join(err.split())
    (row,) = runs_rows(state, env, "status, error, finished_at IS NOT NULL AS ended")
    assert row == {"status": "failed", "error": "RuntimeError: the corpus server went away", "ended": True}
    assert "failed" in lake_runs(state, env)


def test_a_killed_run_stays_running_in_the_lake_and_is_shown_as_crashed(tmp_path):
    state, env = tmp_path / "state", env_with()
    args = ["run", str(write_recipe(tmp_path)), "--no-prefect", "--state-dir", str(state)]
    with gated_run(tmp_path, args, env) as (run, _):
        assert "running" in lake_runs(state, env)
        run.send_signal(signal.SIGKILL)
        run.communicate(timeout=60)
    (row,) = runs_rows(state, env, "status, pid, finished_at")
    assert row == {"status": "running", "pid": run.pid, "finished_at": None}, "nothing could record the end"
    shown = lake_runs(state, env)
    assert "crashed" in shown and "running" not in shown
