"""`viewmill sql` reads the lake and nothing else: every other statement type, and every way to
write, attach, load, copy out, read files or settings from inside a query, is refused with one
message, exit status 2, and the lake (row counts, snapshot hashes, every file's bytes) unchanged."""

from __future__ import annotations

import functools
import hashlib
import shutil
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner
from viewmill.pipelines.cli.app import app
from viewmill.storage.lake import Lake
from viewmill.storage.sql.check import READ_HINT
from viewmill.storage.sql.policy import Use
from viewmill.storage.sql.sandbox import open_query_lake

from tests.lake_state import lake_state, small_lake

runner = CliRunner()


@pytest.fixture(scope="module")
def state(tmp_path_factory):
    """One lake for the refusals: each test checks it is as it was made after its own query."""
    root = tmp_path_factory.mktemp("sandbox")
    small_lake(root / "lake")
    _as_made(root)
    return root


@functools.cache
def _as_made(state: Path) -> tuple[dict, dict[str, str]]:
    """The lake's state and files before the first refused query: read once per state directory."""
    return lake_state(state / "lake"), lake_files(state)


def lake_files(state) -> dict[str, str]:
    """sha256 of every file under the state directory (the writer lock and SQLite's shared memory aside)."""
    return {
        str(p.relative_to(state)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(state.rglob("*"))
        if p.is_file() and p.name != "writer.lock" and not p.name.endswith("-shm")
    }


def _sql(state, query: str, *extra: str):
    return runner.invoke(app, ["sql", query, "--state-dir", str(state), "--format", "csv", *extra])


def _refused(state, query: str) -> str:
    """Run a query that must be refused: exit 2, no traceback, nothing changed; the message, one line."""
    before, files = _as_made(state)
    result = _sql(state, query.format(lake=state / "lake"))
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and result.stdout == ""
    assert lake_state(state / "lake") == before and lake_files(state) == files
    return " ".join(result.output.split())


def _message(text: str) -> str:
    return "error: " + " ".join(text.split())


# One statement of each type DuckDB's parser makes: allowed (None) or the refusal it gets.
STATEMENTS = {
    "SELECT": ("SELECT count(*) AS n FROM sentences", None),
    "EXPLAIN": ("EXPLAIN SELECT count(*) FROM sentences", None),
    "INSERT": ("INSERT INTO sentences SELECT * FROM sentences", "INSERT"),
    "UPDATE": ("UPDATE sentences SET text = 'forged'", "UPDATE"),
    "CREATE": ("CREATE TABLE memory.t AS SELECT 1", "CREATE"),
    "DELETE": ("DELETE FROM sentences", "DELETE"),
    "PREPARE": ("PREPARE p AS SELECT 1", "PREPARE"),
    "EXECUTE": ("EXECUTE p", "EXECUTE"),
    "ALTER": ("ALTER TABLE sentences ADD COLUMN forged INT", "ALTER"),
    "TRANSACTION": ("BEGIN TRANSACTION", "BEGIN"),
    "COPY": ("COPY (SELECT 1) TO '{lake}/catalog.sqlite' (FORMAT csv, USE_TMP_FILE false)", "COPY"),
    "DROP": ("DROP TABLE sentences", "DROP"),
    "EXPORT": ("EXPORT DATABASE '{lake}/data/export'", "EXPORT"),
    "VACUUM": ("VACUUM ANALYZE sentences", "VACUUM"),
    "CALL": ("CALL ducklake_expire_snapshots('lake', older_than => now())", "CALL"),
    "SET": ("SET enable_external_access = true", "SET"),
    "LOAD": ("LOAD '{lake}/x.duckdb_extension'", "LOAD"),
    "ATTACH": ("ATTACH '{lake}/catalog.sqlite' AS raw (TYPE sqlite)", "ATTACH"),
    "DETACH": ("DETACH lake", "DETACH"),
    "COPY_DATABASE": ("COPY FROM DATABASE lake TO memory", "COPY"),
    "MERGE_INTO": ("MERGE INTO sentences USING (SELECT 's9' AS sentence_id) s USING (sentence_id) "
                   "WHEN NOT MATCHED THEN INSERT", "MERGE"),
    "PRAGMA": ("PRAGMA enable_profiling", None),  # refused by name: test_pragmas_that_change_the_session...
}  # fmt: skip
# Statement types no SQL text produces (each still refused: only SELECT and EXPLAIN run).
NO_SQL = {
    "INVALID": "a parse failure, never a statement",
    "RELATION": "made by the Python relational API",
    "LOGICAL_PLAN": "made inside DuckDB from a plan",
    "EXTENSION": "a parser extension's statement: none of viewmill's extensions adds one",
    "ANALYZE": "DuckDB 1.5 parses ANALYZE as VACUUM",
    "VARIABLE_SET": "SET VARIABLE parses as SET",
    "CREATE_FUNC": "CREATE MACRO and CREATE FUNCTION parse as CREATE",
    "MULTI": "DuckDB makes it from one statement (a dynamic PIVOT): test_a_pivot_that_creates_a_type_is_refused",
}


def test_the_statement_table_covers_every_duckdb_statement_type():
    members = set(duckdb.StatementType.__members__)
    assert members == set(STATEMENTS) | set(NO_SQL), "a new DuckDB statement type: add an example or a reason"
    con = duckdb.connect()
    for member, (sql, _) in STATEMENTS.items():
        types = {s.type.name for s in con.extract_statements(sql.format(lake="/nowhere"))}
        assert member in types, (member, types)


@pytest.mark.parametrize("member", sorted(m for m, (_, kind) in STATEMENTS.items() if kind))
def test_every_statement_type_but_a_query_is_refused(state, member):
    sql, kind = STATEMENTS[member]
    assert f"viewmill sql is read-only: {kind} statements are not allowed" in _refused(state, sql)


@pytest.mark.parametrize(("member", "expected"), [("SELECT", "n\n3\n"), ("EXPLAIN", "physical_plan")])
def test_queries_run(state, member, expected):
    result = _sql(state, STATEMENTS[member][0])
    assert result.exit_code == 0, result.output
    assert expected in result.stdout


def test_pragmas_that_change_the_session_are_refused_by_name(state):
    assert _refused(state, "PRAGMA enable_profiling").startswith(
        "error: viewmill sql cannot run PRAGMA enable_profiling ('PRAGMA enable_profiling'): it changes the session"
    )
    assert "SET statements are not allowed" in _refused(state, "PRAGMA threads = 1")


@pytest.mark.parametrize(
    ("query", "kind"),
    [
        ("WITH t AS (SELECT 1) DELETE FROM sentences", "DELETE"),
        ("WITH t AS (SELECT 1) INSERT INTO sentences SELECT * FROM sentences", "INSERT"),
        ("WITH t AS (SELECT 1) UPDATE sentences SET text = 'forged'", "UPDATE"),
        ("SELECT 1; DROP TABLE sentences", "DROP"),
    ],
)
def test_a_write_behind_a_query_keyword_is_refused_by_its_parsed_type(state, query, kind):
    assert f"viewmill sql is read-only: {kind} statements are not allowed" in _refused(state, query)


def test_explain_analyze_cannot_run_a_write(state):
    """Issue 21: EXPLAIN ANALYZE COPY ... (FORMAT csv, USE_TMP_FILE false) overwrote catalog.sqlite
    with 8 bytes (exit 0, every later command failing); EXPLAIN ANALYZE COPY wrote a forged Parquet
    file into the data folder."""
    over_catalog = "EXPLAIN ANALYZE COPY (SELECT 1 AS a) TO '{lake}/catalog.sqlite' (FORMAT csv, USE_TMP_FILE false)"
    forged = "EXPLAIN ANALYZE COPY (FROM sentences) TO '{lake}/data/main/sentences/forged.parquet'"
    for query in (over_catalog, forged):
        assert "viewmill sql is read-only: COPY statements are not allowed" in _refused(state, query)
    assert "INSERT statements are not allowed" in _refused(
        state, "EXPLAIN ANALYZE INSERT INTO sentences FROM sentences"
    )
    assert "EXPLAIN takes no options" in _refused(state, "EXPLAIN (FORMAT json) SELECT 1")
    assert _sql(state, "SELECT count(*) AS n FROM sentences").stdout == "n\n3\n", "the lake still reads"


def test_explain_analyze_of_a_query_in_parentheses_runs_and_options_are_refused_saying_what_to_write(state):
    """Issue 30 (8): `EXPLAIN ANALYZE (SELECT 1)` was refused as "takes no options"."""
    for query, key in (("EXPLAIN ANALYZE (SELECT count(*) AS n FROM sentences)", "analyzed_plan"),
                       ("EXPLAIN (SELECT 1)", "physical_plan")):  # fmt: skip
        result = _sql(state, query)
        assert result.exit_code == 0 and result.stdout.startswith(f"explain_key,explain_value\n{key},"), result.output
    assert "Query Profiling Information" in _sql(state, "EXPLAIN ANALYZE (SELECT 1)").stdout
    assert _sql(state, "EXPLAIN ANALYZE (SELECT 1) UNION (SELECT 2)").exit_code == 0
    for query in ("EXPLAIN (FORMAT json) SELECT 1", "EXPLAIN (ANALYZE) SELECT 1", "EXPLAIN (FORMAT json) (SELECT 1)"):
        assert _refused(state, query) == _message(
            f"EXPLAIN takes no options in viewmill sql ({query[:60]!r}): write EXPLAIN or EXPLAIN ANALYZE and then "
            "the query, e.g. EXPLAIN ANALYZE SELECT count(*) FROM views"
        )
    copy = _refused(state, "EXPLAIN ANALYZE (COPY (SELECT 1) TO '{lake}/x.csv')")  # not a query: DuckDB cannot parse it
    assert copy.startswith('error: query failed: Parser Error: syntax error at or near "COPY"')


# One query for each refused use, written as an attacker would (files, secrets, network, writes...).
REPRESENTATIVES = {
    Use.FILES: ("read_text", "SELECT * FROM read_text('{lake}/catalog.sqlite')"),
    Use.SECRETS: ("current_setting", "SELECT current_setting('s3_secret_access_key') AS k"),
    Use.NETWORK: ("postgres_query", "SELECT * FROM postgres_query('lake', 'DELETE FROM ducklake_snapshot')"),
    Use.WRITE: ("ducklake_expire_snapshots", "SELECT * FROM ducklake_expire_snapshots('lake', older_than => now())"),
    Use.EXEC: ("query", "SELECT * FROM query('SELECT * FROM sentences')"),
    Use.STATE: ("nextval", "SELECT nextval('forged_sequence')"),
}


def test_each_refused_use_is_refused_with_the_documented_message(state):
    assert set(REPRESENTATIVES) == set(Use) - {Use.ALLOWED}
    for use, (name, query) in REPRESENTATIVES.items():
        sql = query.format(lake=state / "lake")
        expected = f"viewmill sql cannot run {name}() ({' '.join(sql.split())[:60]!r}): it {use}; {READ_HINT}"
        assert _refused(state, query) == _message(expected)


def test_several_statements_are_refused_not_dropped(state):
    """Issue 23: `SELECT 1; SELECT 2` printed the last result only, with exit 0."""
    expected = (
        "viewmill sql runs one statement at a time, and the query holds 2 ('SELECT 1'; 'SELECT 2'): run them one by one"
    )
    assert _refused(state, "SELECT 1; SELECT 2") == _message(expected)


def test_a_pivot_that_creates_a_type_is_refused(state):
    assert "list the values, e.g. PIVOT views ON status IN" in _refused(state, "PIVOT sentences ON lang USING count(*)")
    assert _sql(state, "PIVOT sentences ON lang IN ('en') USING count(*)").exit_code == 0


def test_a_view_planted_in_the_lake_is_checked_through_its_plan(tmp_path, state):
    """Someone with write access defines a view over a settings read: readers' plans show it."""
    shutil.copytree(state / "lake", tmp_path / "lake")  # a copy of the shared lake: this one is changed
    with Lake(tmp_path / "lake") as lake:
        lake.con.execute("CREATE VIEW planted AS SELECT current_setting('threads') AS k")
    (tmp_path / "lake" / "data" / "notes.csv").write_text("a\n1\n")
    message = _refused(tmp_path, "SELECT * FROM planted")
    assert message.startswith("error: viewmill sql cannot run current_setting() ('SELECT * FROM planted'): it reads")
    # A replacement scan (FROM 'file') reads a CSV file even inside the data folder: its plan is refused.
    assert "cannot check this query's plan" in _refused(tmp_path, "SELECT * FROM '{lake}/data/notes.csv'")


def test_reading_outside_the_lake_is_refused_by_the_connection(state, tmp_path_factory):
    outside = tmp_path_factory.mktemp("elsewhere") / "secret.parquet"
    pq.write_table(pa.table({"a": [1]}), outside)
    message = _refused(state, f"SELECT * FROM read_parquet('{outside}')")
    assert message.startswith(
        "error: viewmill sql reads only the lake's tables and its data folder: Cannot access file"
    )
    assert "file system operations are disabled by configuration" in message


def test_the_locked_connection_refuses_settings_even_without_the_statement_check(state):
    with open_query_lake(state / "lake") as lake:
        for setting in ("enable_external_access = true", "allowed_directories = ['/']", "lock_configuration = false",
                        "temp_directory = '/tmp'", "memory_limit = '100GB'"):  # fmt: skip
            with pytest.raises(duckdb.InvalidInputException, match="the configuration has been locked"):
                lake.con.execute(f"SET {setting}")
        with pytest.raises(duckdb.PermissionException, match="Loading external extensions is disabled"):
            lake.con.execute("LOAD httpfs")


def test_the_locked_connection_cannot_reach_the_real_catalog_or_any_other_file(state):
    """With the checker bypassed: the catalog attached is a private copy, so the real one is not
    among the paths DuckDB allows; nothing outside the data folder is writable; no temp folder."""
    files = lake_files(state)
    catalog = state / "lake" / "catalog.sqlite"
    with open_query_lake(state / "lake") as lake:
        for target in (catalog, state / "elsewhere.csv"):
            with pytest.raises(duckdb.PermissionException, match="file system operations are disabled"):
                lake.con.execute(f"COPY (SELECT 1) TO '{target}' (FORMAT csv, USE_TMP_FILE false)")
        temp, allowed = lake.con.execute(
            "SELECT current_setting('temp_directory'), current_setting('allowed_directories')"
        ).fetchone()
        assert temp == "" and allowed == [f"{(state / 'lake' / 'data').resolve()}/"]
        assert str(catalog) not in lake.con.execute("SELECT current_setting('allowed_paths')").fetchone()[0]
    assert lake_files(state) == files


def test_selects_and_the_lakes_own_parquet_files_still_work(state):
    assert _sql(state, "SELECT count(*) AS n FROM sentences").stdout == "n\n3\n"
    parquet = f"SELECT count(*) AS n FROM read_parquet('{state}/lake/data/**/*.parquet')"
    assert _sql(state, parquet).stdout == "n\n3\n"
    for query in ("DESCRIBE sentences", "SUMMARIZE sentences", "PRAGMA table_info('sentences')", "SHOW TABLES"):
        result = _sql(state, query)
        assert result.exit_code == 0 and "sentence" in result.stdout, (query, result.output)
    with_cte = _sql(state, "WITH t AS (FROM sentences) SELECT max(text) AS m FROM t")
    assert with_cte.stdout == "m\nsentence 2\n"
    assert _sql(state, "EXPLAIN ANALYZE SELECT count(*) FROM sentences").exit_code == 0
