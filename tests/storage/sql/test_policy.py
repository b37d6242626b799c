"""The sandbox policy against DuckDB's own catalogs: every table function, pragma, function and
setting that DuckDB (with the extensions viewmill loads) lists is classified, so an upgrade that
adds one fails here until it is; every refused name is refused by the checker with its reason;
every credential-bearing setting is empty and unreadable once the connection is locked."""

from __future__ import annotations

import duckdb
import pytest
from viewmill.storage.catalog import extension_path
from viewmill.storage.lake import Lake
from viewmill.storage.sql.check import READ_HINT, QueryRefused, checked_query
from viewmill.storage.sql.names import ALLOWED_FUNCTIONS
from viewmill.storage.sql.policy import (
    CREDENTIAL_SETTINGS,
    PRAGMAS,
    REFUSED_FUNCTIONS,
    SETTINGS,
    SYNTAX_FUNCTIONS,
    TABLE_FUNCTIONS,
    Use,
)
from viewmill.storage.sql.sandbox import lock_down

from tests.lake_state import small_lake

# Every extension a lake may load: ducklake and sqlite_scanner (the default catalog) come with it.
EXTRA_EXTENSIONS = ("httpfs", "postgres_scanner")
NO_POLICY = "viewmill's sandbox policy does not know it (storage/sql/policy.py)"


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    """The lake a query sees: every extension loaded, credentials set as a leak would find them, locked."""
    root = small_lake(tmp_path_factory.mktemp("policy") / "lake")
    with Lake(root, read_only=True) as opened:
        for name in EXTRA_EXTENSIONS:
            opened.con.execute(f"LOAD '{extension_path(name)}'")
        for setting in CREDENTIAL_SETTINGS:
            opened.con.execute(f"SET {setting} = 'sentinel-{setting}'")
        lock_down(opened)
        yield opened


def _live(lake: Lake, sql: str) -> set[str]:
    return {row[0] for row in lake.con.execute(sql).fetchall()}


def _compare(live: set[str], classified: set[str], what: str) -> None:
    new, gone = sorted(live - classified), sorted(classified - live)
    assert not new and not gone, (
        f"DuckDB's {what} changed: classify {new} in storage/sql/policy.py (or names.py), drop {gone}"
    )


def test_every_table_function_and_table_macro_is_classified(lake):
    live = _live(lake, "SELECT function_name FROM duckdb_functions() WHERE function_type IN ('table', 'table_macro')")
    _compare(live, set(TABLE_FUNCTIONS), "table functions")


def test_every_pragma_is_classified(lake):
    _compare(_live(lake, "SELECT function_name FROM duckdb_functions() WHERE function_type = 'pragma'"), set(PRAGMAS),
             "pragmas")  # fmt: skip


def test_every_scalar_aggregate_and_macro_function_is_classified(lake):
    live = _live(
        lake, "SELECT function_name FROM duckdb_functions() WHERE function_type IN ('scalar', 'aggregate', 'macro')"
    )
    assert not ALLOWED_FUNCTIONS & set(REFUSED_FUNCTIONS), "a function both allowed and refused"
    _compare(live, ALLOWED_FUNCTIONS | set(REFUSED_FUNCTIONS), "scalar, aggregate and macro functions")
    assert not SYNTAX_FUNCTIONS & live, "a syntax function DuckDB now lists: classify it with the others"


def test_every_setting_is_classified(lake):
    _compare(_live(lake, "SELECT name FROM duckdb_settings()"), set(SETTINGS), "settings")


REFUSED_TABLE_FUNCTIONS = sorted(name for name, use in TABLE_FUNCTIONS.items() if use is not Use.ALLOWED)


@pytest.mark.parametrize("name", REFUSED_TABLE_FUNCTIONS)
def test_each_refused_table_function_is_refused_with_its_reason(lake, name):
    sql = f"SELECT * FROM {name}()"
    with pytest.raises(QueryRefused) as refused:
        checked_query(lake.con, sql)
    assert str(refused.value) == f"viewmill sql cannot run {name}() ({sql!r}): it {TABLE_FUNCTIONS[name]}; {READ_HINT}"


@pytest.mark.parametrize("name", sorted(REFUSED_FUNCTIONS))
def test_each_refused_function_is_refused_with_its_reason(lake, name):
    sql = f"SELECT {name}('x')"
    with pytest.raises(QueryRefused) as refused:
        checked_query(lake.con, sql)
    assert (
        str(refused.value) == f"viewmill sql cannot run {name}() ({sql!r}): it {REFUSED_FUNCTIONS[name]}; {READ_HINT}"
    )


def test_allowed_table_functions_pass_the_policy(lake):
    """An allowed name is never refused by the policy (it may still need arguments to run)."""
    for name in sorted(n for n, use in TABLE_FUNCTIONS.items() if use is Use.ALLOWED):
        try:
            checked_query(lake.con, f"SELECT * FROM {name}()")
        except QueryRefused as exc:
            assert "cannot run" not in str(exc), (name, str(exc))


def test_an_unknown_function_is_refused_until_classified(lake):
    """A name missing from the policy (one a DuckDB upgrade adds, or a macro someone put in the lake)."""
    sql = "SELECT * FROM some_new_table_function()"
    with pytest.raises(QueryRefused) as refused:
        checked_query(lake.con, sql)
    assert (
        str(refused.value) == f"viewmill sql cannot run some_new_table_function() ({sql!r}): {NO_POLICY}; {READ_HINT}"
    )


PRAGMA_ARGUMENTS = {"table_info": "('sentences')", "storage_info": "('sentences')", "import_database": "('/tmp')",
                    "copy_database": "(lake, memory)", "add_parquet_key": "('k', '0123456789112345')",
                    "json_execute_serialized_sql": "('{}')"}  # fmt: skip


@pytest.mark.parametrize("name", sorted(PRAGMAS))
def test_each_pragma_runs_only_if_it_reads(lake, name):
    sql = f"PRAGMA {name}{PRAGMA_ARGUMENTS.get(name, '')}"
    allowed = ", ".join(sorted(n for n, use in PRAGMAS.items() if use is Use.ALLOWED))
    if PRAGMAS[name] is not Use.ALLOWED:
        with pytest.raises(QueryRefused) as refused:
            checked_query(lake.con, sql)
        reason = f"it {PRAGMAS[name]}; the pragmas that read are: {allowed}"
        assert str(refused.value) == f"viewmill sql cannot run PRAGMA {name} ({sql!r}): {reason}"
    elif name == "show":  # DuckDB's parser takes SHOW as the SHOW statement, so PRAGMA show cannot be written
        with pytest.raises(QueryRefused, match='syntax error at or near "show"'):
            checked_query(lake.con, sql)
    else:
        assert lake.con.execute(checked_query(lake.con, sql)).fetchall() is not None


def test_credential_settings_are_emptied_and_no_setting_is_readable(lake):
    values = dict(lake.con.execute("SELECT name, value FROM duckdb_settings()").fetchall())
    assert {name: values[name] for name in CREDENTIAL_SETTINGS} == dict.fromkeys(CREDENTIAL_SETTINGS, "")
    assert [name for name, value in values.items() if "sentinel" in str(value)] == []
    not_refused = []
    for name in sorted(SETTINGS):  # read back, changed, reset: each refused before it runs
        for sql in (f"SELECT current_setting('{name}')", f"SET {name} = 'x'", f"RESET {name}",
                    f"SELECT value FROM duckdb_settings() WHERE name = '{name}'"):  # fmt: skip
            try:
                checked_query(lake.con, sql)
                not_refused.append(sql)
            except QueryRefused:
                pass
    assert not_refused == []


def test_the_locked_connection_keeps_every_credential_setting_empty(lake):
    """Even with the checker bypassed, a credential setting cannot be set back or read as anything but ''."""
    for setting in CREDENTIAL_SETTINGS:
        with pytest.raises(duckdb.InvalidInputException, match="the configuration has been locked"):
            lake.con.execute(f"SET {setting} = 'x'")
        assert lake.con.execute(f"SELECT current_setting('{setting}')").fetchone()[0] == ""
