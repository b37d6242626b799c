"""A PostgreSQL catalog's password never shows: not on stdout or stderr, not in Prefect's
logs or database (flow parameters), not in the state directory or the lake's catalog,
after a run that fails with it and one that succeeds with it."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import needs_apertium, write_tiny_recipe
from tests.postgres import needs_postgres, postgres_bin, postgres_server

PASSWORD = "Pw-9f3kX2-not-for-logs"


@pytest.fixture(scope="module")
def guarded_postgres():
    """A real server whose TCP logins need PASSWORD; yields a conninfo without it."""
    with postgres_server(database="lake", password=PASSWORD) as dsn:
        yield dsn


def _viewmill(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIEWMILL_", "PREFECT_API_URL", "PG"))}
    env["PREFECT_HOME"] = str(tmp_path / "prefect-home")
    return subprocess.run(
        [sys.executable, "-m", "viewmill.pipelines.cli.app", *args],
        capture_output=True, text=True, env=env, timeout=900,
    )  # fmt: skip


def _files_holding(root: Path, secret: str) -> list[str]:
    needle = secret.encode()
    return [str(p) for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


def _catalog_dump(dsn: str) -> str:
    dump = subprocess.run(
        [str(postgres_bin() / "pg_dump"), f"{dsn} password={PASSWORD}"], capture_output=True, text=True, check=True
    )
    return dump.stdout


@needs_postgres
def test_a_wrong_password_fails_with_a_message_that_does_not_hold_it(tmp_path, guarded_postgres):
    wrong = "Wr0ng-pass-also-secret"
    result = _viewmill(
        tmp_path, "sql", "SELECT 1", "--state-dir", str(tmp_path / "state"),
        "--catalog", f"postgres:{guarded_postgres} password={wrong}",
    )  # fmt: skip
    assert result.returncode == 2
    assert 'password authentication failed for user "viewmill"' in result.stderr
    assert result.stderr.startswith("error: cannot open the lake catalog ducklake:postgres:user=viewmill dbname=lake")
    assert wrong not in result.stdout + result.stderr and "password=" not in result.stderr
    assert "Traceback" not in result.stderr


@needs_postgres
@needs_apertium
def test_the_password_is_nowhere_after_a_failing_and_a_succeeding_prefect_run(tmp_path, tiny_model, guarded_postgres):
    recipe = write_tiny_recipe(tmp_path, tiny_model)
    state = tmp_path / "state"
    catalog = f"postgres:{guarded_postgres} password={PASSWORD}"
    # Fails inside the flow, after ingest and augmentation wrote to the lake: a batch larger than the pairs.
    failing = _viewmill(tmp_path, "run", str(recipe), "--state-dir", str(state), "--catalog", catalog,
                        "--set", "train.batch_size=64")  # fmt: skip
    succeeding = _viewmill(tmp_path, "run", str(recipe), "--state-dir", str(state), "--catalog", catalog)
    assert succeeding.returncode == 0, succeeding.stderr[-3000:]
    assert failing.returncode == 1 and "fewer than one batch of 64" in failing.stderr, failing.stderr[-3000:]
    for result in (failing, succeeding):
        assert PASSWORD not in result.stdout + result.stderr
    assert _files_holding(tmp_path, PASSWORD) == [], "state, lake data, Prefect home and logs"
    # Prefect did record the flow runs with their parameters: the place the password went before.
    databases = [p for p in tmp_path.rglob("*.db") if p.is_file()]
    parameters = []
    for db in databases:
        with sqlite3.connect(db) as con:
            if con.execute("SELECT count(*) FROM sqlite_master WHERE name = 'flow_run'").fetchone()[0]:
                parameters += [row[0] for row in con.execute("SELECT parameters FROM flow_run")]
    assert parameters and all("recipe_path" in p and PASSWORD not in p for p in parameters), parameters
    dump = _catalog_dump(guarded_postgres)
    assert "ducklake_snapshot" in dump and PASSWORD not in dump
