"""`viewmill lake attach`: the printed SQL opens the lake in a separate DuckDB process (the
Python module in a subprocess, and the DuckDB shell where one is on PATH), reads what viewmill
reads, cannot write unless asked, and never prints a secret. Real DuckDB and DuckLake."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner
from viewmill.pipelines.cli.app import app
from viewmill.storage.attach import LakeLocation, attach_sql, secret_statements
from viewmill.storage.catalog import Catalog
from viewmill.storage.lake import Lake, LakeError

from tests.lake_state import paired_lake
from tests.postgres import needs_postgres, postgres_server

runner = CliRunner()
TABLES = ("sentences", "views", "pairs", "snapshots", "corpus_versions")
CLI = [sys.executable, "-m", "viewmill.pipelines.cli.app"]
# Runs the SQL on stdin in a fresh DuckDB (no viewmill import), then prints each table's count
# as JSON, or the error a write raises.
READER = """
import json, sys, duckdb
con = duckdb.connect()
con.execute(sys.stdin.read())
counts = {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in sys.argv[1].split(",")}
write = None
try:
    con.execute("INSERT INTO sentences (corpus, sentence_id, text, lang) VALUES ('c', 'new', 'new text', 'en')")
except duckdb.Error as exc:
    write = str(exc)
print(json.dumps({"counts": counts, "write_error": write}))
"""


@pytest.fixture
def state(tmp_path) -> Path:
    """A state directory whose lake holds sentences, views, a pairs snapshot (several commits)."""
    paired_lake(tmp_path / "state" / "lake")
    return tmp_path / "state"


def _counts(lake_root: Path) -> dict[str, int]:
    with Lake(lake_root, read_only=True) as lake:
        return {table: lake.scalar(f"SELECT count(*) FROM {table}") for table in TABLES}


def _attach(state: Path, *flags: str) -> str:
    result = runner.invoke(app, ["lake", "attach", "--state-dir", str(state), *flags])
    assert result.exit_code == 0, result.output
    return result.stdout


def _run_elsewhere(sql: str, env: dict[str, str] | None = None) -> dict:
    """The printed SQL in a separate Python process, as a user's own DuckDB would run it."""
    done = subprocess.run(
        [sys.executable, "-c", READER, ",".join(TABLES)], input=sql, capture_output=True, text=True, timeout=300,
        env={**os.environ, **(env or {})},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_printed_sql_reads_the_lakes_counts_in_another_process_and_cannot_write(state):
    sql = _attach(state, "--duckdb-version", duckdb.__version__)
    assert "READ_ONLY" in sql and f"DATA_PATH '{state / 'lake' / 'data'}/'" in sql and "USE lake;" in sql
    assert "LOAD '" in sql and "ducklake.duckdb_extension" in sql and "sqlite_scanner.duckdb_extension" in sql
    assert "INSTALL" not in sql, "viewmill's own DuckDB version loads the bundled extensions, offline"
    before = _counts(state / "lake")
    seen = _run_elsewhere(sql)
    assert seen["counts"] == before and before["views"] == 12
    assert seen["write_error"] is not None and "read-only" in seen["write_error"].lower()
    assert _counts(state / "lake") == before


def test_a_moved_lake_is_attached_at_its_own_data_folder(state, tmp_path):
    moved = tmp_path / "moved"
    shutil.move(state, moved)
    sql = _attach(moved, "--duckdb-version", duckdb.__version__)
    assert f"DATA_PATH '{moved / 'lake' / 'data'}/'" in sql and "OVERRIDE_DATA_PATH true" in sql
    assert _run_elsewhere(sql)["counts"] == _counts(moved / "lake")


def test_read_write_warns_and_what_it_writes_is_refused_until_hashes_are_recorded(state):
    result = runner.invoke(app, ["lake", "attach", "--state-dir", str(state), "--read-write",
                                 "--duckdb-version", duckdb.__version__])  # fmt: skip
    assert result.exit_code == 0, result.output
    warning = " ".join(result.stderr.split())
    assert "bypasses viewmill's writer lock" in warning and "viewmill lake verify --record-hashes" in warning
    assert "READ_ONLY" not in result.stdout and "DATA_INLINING_ROW_LIMIT 0" in result.stdout
    seen = _run_elsewhere(result.stdout)
    assert seen["write_error"] is None, "a read-write attach writes"
    with Lake(state / "lake") as lake:
        assert lake.scalar("SELECT count(*) FROM sentences WHERE sentence_id = 'new'") == 1
        with pytest.raises(LakeError, match="no recorded content hash"):
            lake.require_intact(["sentences"], "pair views")
    recorded = runner.invoke(app, ["lake", "verify", "--record-hashes", "--state-dir", str(state)])
    assert recorded.exit_code == 0, recorded.output
    with Lake(state / "lake") as lake:
        lake.require_intact(["sentences"], "pair views")  # trusted once checked and recorded


def test_another_duckdb_version_installs_the_extensions_and_an_old_one_is_refused(state):
    newer = _attach(state, "--duckdb-version", "2.0.0")
    assert "INSTALL ducklake;\nLOAD ducklake;\nINSTALL sqlite;\nLOAD sqlite;" in newer
    assert ".duckdb_extension" not in newer
    assert "For DuckDB 2.0.0" in newer and "DuckDB 1.5.2 or newer" in newer
    old = runner.invoke(app, ["lake", "attach", "--state-dir", str(state), "--duckdb-version", "1.4.4"])
    message = " ".join(old.output.split())
    assert old.exit_code == 2 and "DuckDB 1.4.4 cannot read this lake (DuckLake catalog format 1.0)" in message
    assert f"pip install duckdb-cli=={duckdb.__version__}" in message


def test_no_password_or_s3_key_is_printed_but_a_shell_viewmill_starts_gets_them(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDSECRETID")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3-very-secret")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    catalog = Catalog.parse("postgres:dbname=lake host=db.example user=vm password=pg-very-secret", Path("/x"))
    where = LakeLocation("/x", catalog, "s3://bucket/lake/", override=False, format="1.0")
    sql = attach_sql(where, duckdb_version=duckdb.__version__)
    for secret in ("pg-very-secret", "s3-very-secret", "AKIDSECRETID"):
        assert secret not in sql
    assert f"ATTACH '{catalog.uri}' AS lake (READ_ONLY, DATA_PATH 's3://bucket/lake/');" in sql
    assert "dbname=lake" in catalog.uri and "password" not in catalog.uri
    assert "PGPASSWORD" in sql and "PASSWORD '<password>'" in sql and "'<AWS_SECRET_ACCESS_KEY>'" in sql
    assert "postgres_scanner.duckdb_extension" in sql and "httpfs.duckdb_extension" in sql
    assert "REGION 'eu-west-1'" in sql
    real = "\n".join(secret_statements(where))
    assert "pg-very-secret" in real and "s3-very-secret" in real


@needs_postgres
def test_a_postgres_catalog_attaches_with_pgpassword_and_its_password_is_never_printed(tmp_path, monkeypatch):
    password = "Pw-attach-7hq2-never-printed"
    with postgres_server(database="lake", password=password) as dsn:
        catalog = f"postgres:{dsn} password={password}"
        monkeypatch.setenv("VIEWMILL_CATALOG", catalog)
        lake_root = tmp_path / "state" / "lake"
        paired_lake(lake_root)
        args = ["lake", "attach", "--state-dir", str(tmp_path / "state"), "--duckdb-version", duckdb.__version__]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        assert password not in result.output and "PGPASSWORD" in result.stdout
        assert "postgres_scanner.duckdb_extension" in result.stdout and "READ_ONLY" in result.stdout
        assert _run_elsewhere(result.stdout, env={"PGPASSWORD": password})["counts"] == _counts(lake_root)
        if shutil.which("duckdb") and duckdb.__version__ in subprocess.check_output(["duckdb", "--version"], text=True):
            shell = subprocess.run(  # the shell viewmill starts gets the password from a private init file
                [*CLI, "lake", "attach", "--open", "--state-dir", str(tmp_path / "state")],
                input=".mode csv\nSELECT count(*) AS n FROM views;\n", capture_output=True, text=True, timeout=300,
                env={k: v for k, v in os.environ.items() if k != "PGPASSWORD"},
            )  # fmt: skip
            assert "n\n12\n" in shell.stdout and password not in shell.stdout + shell.stderr, shell.stderr


def test_open_without_a_duckdb_shell_says_how_to_get_one(state, tmp_path):
    empty = tmp_path / "empty-path"
    empty.mkdir()
    result = runner.invoke(app, ["lake", "attach", "--open", "--state-dir", str(state)], env={"PATH": str(empty)})
    message = " ".join(result.output.split())
    assert result.exit_code == 2, result.output
    assert "no `duckdb` on PATH" in message and f"pip install duckdb-cli=={duckdb.__version__}" in message


def test_the_shell_runs_without_the_allocator_viewmill_preloads(state, tmp_path):
    """The DuckDB shell is the user's program: it starts on its own allocator, the other preloads kept."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    shell = bindir / "duckdb"
    shell.write_text(f'#!/bin/sh\n[ "$1" = --version ] && echo "v{duckdb.__version__}" && exit 0\n'
                     f'echo "preload=$LD_PRELOAD" > {tmp_path / "seen"}\n')  # fmt: skip
    shell.chmod(0o755)
    preload = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2:/opt/libmine.so"
    env = {"PATH": f"{bindir}:{os.environ['PATH']}", "LD_PRELOAD": preload}
    result = runner.invoke(app, ["lake", "attach", "--open", "--state-dir", str(state)], env=env)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "seen").read_text().strip() == "preload=/opt/libmine.so"


@pytest.mark.skipif(shutil.which("duckdb") is None, reason="no DuckDB command-line shell on PATH")
def test_open_starts_the_duckdb_shell_with_the_lake_attached_read_only(state):
    version = subprocess.run(["duckdb", "--version"], capture_output=True, text=True, check=True).stdout
    if duckdb.__version__ not in version:
        pytest.skip(f"the duckdb on PATH is {version.strip()}: INSTALL would need DuckDB's extension repository")
    query = ".mode csv\nSELECT count(*) AS n FROM views;\nINSERT INTO sentences (sentence_id) VALUES ('x');\n"
    done = subprocess.run(
        [*CLI, "lake", "attach", "--open", "--state-dir", str(state)],
        input=query, capture_output=True, text=True, timeout=300, env={**os.environ, "NO_COLOR": "1"},
    )  # fmt: skip
    assert "n\n12\n" in done.stdout, done.stdout + done.stderr
    assert "read-only" in (done.stdout + done.stderr).lower()
    assert _counts(state / "lake")["sentences"] == 6
