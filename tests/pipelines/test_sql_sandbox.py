"""`viewmill sql` reads the lake and nothing else: every way to write, attach, load an
extension, copy out or change a setting is refused with one message, exit code 2."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner
from viewmill.pipelines.cli import app

from tests.lake_state import lake_state, small_lake

runner = CliRunner()


@pytest.fixture
def state(tmp_path):
    small_lake(tmp_path / "lake")
    return tmp_path


def _sql(state, query: str):
    return runner.invoke(app, ["sql", query, "--state-dir", str(state), "--format", "csv"])


REFUSED = [
    ("DELETE FROM sentences", "DELETE"),
    ("INSERT INTO sentences SELECT * FROM sentences", "INSERT"),
    ("ATTACH 'ducklake:sqlite:{lake}/catalog.sqlite' AS rw (DATA_PATH '{lake}/data/')", "ATTACH"),
    ("ATTACH '{lake}/catalog.sqlite' AS raw (TYPE sqlite)", "ATTACH"),
    ("INSTALL httpfs", "LOAD"),  # DuckDB parses INSTALL as a LOAD statement
    ("LOAD '{lake}/x.duckdb_extension'", "LOAD"),
    ("COPY (SELECT * FROM sentences) TO '{lake}/data/leak.parquet'", "COPY"),
    ("SET enable_external_access = true", "SET"),
    ("RESET lock_configuration", "SET"),
    ("CREATE TABLE memory.t AS SELECT 1", "CREATE"),
    ("SELECT 1; DROP TABLE sentences", "DROP"),
    ("CALL ducklake_expire_snapshots('lake', older_than => now())", "CALL"),
]


@pytest.mark.parametrize(("query", "kind"), REFUSED)
def test_writes_attach_load_copy_and_settings_are_refused(state, query, kind):
    before = lake_state(state / "lake")
    files_before = sorted(p.relative_to(state) for p in state.rglob("*"))
    result = _sql(state, query.format(lake=state / "lake"))
    assert result.exit_code == 2, result.output
    assert f"viewmill sql is read-only: {kind} statements are not allowed" in " ".join(result.output.split())
    assert "Traceback" not in result.output
    assert lake_state(state / "lake") == before
    assert sorted(p.relative_to(state) for p in state.rglob("*") if p.name != "writer.lock") == [
        p for p in files_before if p.name != "writer.lock"
    ]


def test_reading_outside_the_lake_is_refused_by_the_connection(state, tmp_path_factory):
    secret = tmp_path_factory.mktemp("elsewhere") / "secret.csv"
    secret.write_text("a\n1\n")
    result = _sql(state, f"SELECT * FROM read_csv('{secret}')")
    assert result.exit_code == 2
    assert "file system operations are disabled by configuration" in result.output


def test_the_locked_connection_refuses_settings_even_without_the_statement_check(state):
    import duckdb
    from viewmill.storage.sandbox import open_query_lake

    with open_query_lake(state / "lake") as lake:
        for setting in ("enable_external_access = true", "allowed_directories = ['/']", "lock_configuration = false"):
            with pytest.raises(duckdb.InvalidInputException, match="the configuration has been locked"):
                lake.con.execute(f"SET {setting}")
        with pytest.raises(duckdb.PermissionException, match="Loading external extensions is disabled"):
            lake.con.execute("LOAD httpfs")


def test_selects_and_the_lakes_own_parquet_files_still_work(state):
    assert _sql(state, "SELECT count(*) AS n FROM sentences").stdout == "n\n3\n"
    parquet = f"SELECT count(*) AS n FROM read_parquet('{state}/lake/data/**/*.parquet')"
    assert _sql(state, parquet).stdout == "n\n3\n"
    described = _sql(state, "DESCRIBE sentences")
    assert described.exit_code == 0 and "sentence_id" in described.stdout
    with_cte = _sql(state, "WITH t AS (FROM sentences) SELECT max(text) AS m FROM t")
    assert with_cte.stdout == "m\nsentence 2\n"
