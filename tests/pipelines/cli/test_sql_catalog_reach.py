"""The lake catalog's own database is out of `viewmill sql`'s reach as a class (issue 30): every
table function, table macro and pragma DuckDB lists with a parameter that takes a string (a table,
a name, a path) is called with each place the signing key is or was (the catalog table older
lakes kept it in, the key file) and each table of the catalog's metadata database, on SQLite-,
DuckDB-file- and PostgreSQL-catalog lakes: each is refused or gives back nothing of theirs.
Representative ones go through the CLI (exact message, exit 2), and a record forged with whatever
the queries gave back does not make `lake verify` pass a changed file."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner
from viewmill.pipelines.cli.app import app
from viewmill.storage.file_hashes import RECORD_DIR
from viewmill.storage.lake import Lake
from viewmill.storage.lake_files import META, catalog_files
from viewmill.storage.lake_key import key_path
from viewmill.storage.sql.check import METADATA_HINT, READ_HINT, QueryRefused, checked_query
from viewmill.storage.sql.policy import Use
from viewmill.storage.sql.sandbox import open_query_lake

from tests.lake_state import change_in_place, move_key_into_catalog, small_lake
from tests.postgres import needs_postgres, postgres_server

runner = CliRunner()
MARKER_TABLE, MARKER = "viewmill_marker", "metadata-marker-5c1f9e7d2b"
STRING_TYPES = {"VARCHAR", "ANY", "JSON", "VARCHAR[]", None}  # None: a macro's untyped parameter
DEFAULTS = {"BIGINT": "1", "UBIGINT": "1", "UINTEGER": "1", "DOUBLE": "1.0", "BOOLEAN": "true", "TABLE": "(SELECT 1)"}


@dataclass
class CatalogLake:
    state: Path
    catalog: str
    key: str  # hex: in the catalog's old key table and in the key file at once
    tables: dict[str, str]  # every table of the metadata database -> one of its columns
    secrets: set[str]  # every distinctive value the metadata database holds, the key and a marker among them


def _table_names(catalog: str, root: Path) -> list[str]:
    """The metadata database's tables, listed by its own client (DuckDB hides the database)."""
    kind, _, dsn = catalog.partition(":")
    if kind == "sqlite":
        with sqlite3.connect(root / "catalog.sqlite") as con:
            return [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    if kind == "duckdb":
        with duckdb.connect(str(root / "catalog.ducklake"), read_only=True) as con:
            return [r[0] for r in con.execute("SHOW TABLES").fetchall()]
    import psycopg

    with psycopg.connect(dsn) as con:
        listed = con.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'")
        return [r[0] for r in listed]


def _build(state: Path, catalog: str) -> CatalogLake:
    """A lake whose catalog holds the key (as on main) and a marker table, and whose key file holds it too."""
    root = small_lake(state / "lake", catalog=catalog)
    with Lake(root, catalog=catalog) as lake:
        lake.con.execute(f"CREATE TABLE {META}.{MARKER_TABLE} (secret VARCHAR)")
        lake.con.execute(f"INSERT INTO {META}.{MARKER_TABLE} VALUES ('{MARKER}')")
    key = move_key_into_catalog(root, catalog, keep_file=True)
    tables, secrets = {}, {key, MARKER}
    with Lake(root, read_only=True, catalog=catalog) as lake:
        for name in _table_names(catalog, root):
            result = lake.con.execute(f'SELECT * FROM {META}."{name}"')
            tables[name] = result.description[0][0]
            secrets |= {str(value) for row in result.fetchall() for value in row if len(str(value)) >= 16}
    assert {"viewmill_lake_key", MARKER_TABLE, "ducklake_data_file", "ducklake_metadata"} <= set(tables)
    return CatalogLake(state, catalog, key, tables, secrets)


@pytest.fixture(scope="module", params=["sqlite", "duckdb", pytest.param("postgres", marks=needs_postgres)])
def lake(request, tmp_path_factory) -> Iterator[CatalogLake]:
    state = tmp_path_factory.mktemp(request.param)
    if request.param != "postgres":
        yield _build(state, request.param)
        return
    with postgres_server(database="reach") as dsn:
        yield _build(state, f"postgres:{dsn}")


def _targets(lake: CatalogLake) -> list[tuple[str, str]]:
    """(name or path, a column of it) for every place a query must not reach."""
    qualified = [(f"{META}.{name}", column) for name, column in lake.tables.items()]
    spelled = [(f'"{META}"."viewmill_lake_key"', "key"), (f"{META.upper()}.VIEWMILL_LAKE_KEY", "key"),
               ("viewmill_lake_key", "key"), (META, "key"), (str(key_path(lake.state / "lake")), "key")]  # fmt: skip
    return qualified + spelled


def _signatures(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str, list, list]]:
    """Every table function, table macro and pragma overload with a parameter that takes a string."""
    rows = con.execute(
        "SELECT DISTINCT function_name, function_type, parameters, parameter_types FROM duckdb_functions() "
        "WHERE function_type IN ('table', 'table_macro', 'pragma')"
    ).fetchall()
    found = [(n, k, p, list(t) if t else [None] * len(p)) for n, k, p, t in rows]
    return sorted((s for s in found if set(s[3]) & STRING_TYPES), key=repr)


def _call(signature: tuple[str, str, list, list], target: str, column: str) -> str:
    name, kind, params, types = signature
    literal = "'" + target.replace("'", "''") + "'"
    if kind == "table_macro":  # histogram(source, col_name, ...): a table and one of its columns
        args = [literal, f'"{column}"'][: max(1, min(2, len(params)))]
    else:
        args = [
            f"[{literal}]" if t == "VARCHAR[]" else literal if t in STRING_TYPES else DEFAULTS.get(t, "NULL")
            for t in types
        ]
    call = f"{name}({', '.join(args)})"
    return f"PRAGMA {call}" if kind == "pragma" else f"SELECT * FROM {call}"


def _attempt(con: duckdb.DuckDBPyConnection, sql: str) -> tuple[str, str]:
    """("refused", message) when the check refuses it, else ("ran" | "failed", what came back)."""
    try:
        checked = checked_query(con, sql)
    except QueryRefused as exc:
        return "refused", str(exc)
    try:
        return "ran", repr(con.execute(checked).fetchall())
    except duckdb.Error as exc:
        return "failed", str(exc)


def _attempt_in_transaction(con: duckdb.DuckDBPyConnection, sql: str) -> tuple[str, str]:
    """`_attempt` inside the transaction the caller began: the catalog's schema is then read once for
    all the checks, not once per query (a PostgreSQL catalog's over the network: ~8x faster). A query
    that failed while running aborts the transaction: a new one begins, so the next check runs as if
    alone."""
    found = _attempt(con, sql)
    try:
        con.execute("SELECT 1")
    except duckdb.TransactionException:
        con.execute("ROLLBACK")
        con.execute("BEGIN TRANSACTION")
    return found


def test_no_table_function_or_pragma_reaches_the_key_or_the_catalogs_metadata(lake):
    leaks, name_takers, reached = [], set(), []
    with open_query_lake(lake.state / "lake", lake.catalog) as opened:
        signatures = _signatures(opened.con)
        # The class that reads a table given by name: those that run on a DuckDB table named to them
        # (made here, past the check, in the connection's temporary schema: nothing on disk) and
        # not on a name no table has.
        opened.con.execute("CREATE TEMPORARY TABLE probe AS SELECT 'probe text' AS text")
        opened.con.execute("BEGIN TRANSACTION")  # made here, past the check, as the probe table
        for signature in signatures:
            calls = [_call(signature, name, "text") for name in ("probe", "no_probe")]
            runs = [_attempt_in_transaction(opened.con, sql)[0] == "ran" for sql in calls]
            if runs == [True, False]:
                name_takers.add(signature[0])
        for signature in signatures:
            for target, column in _targets(lake):
                sql = _call(signature, target, column)
                outcome, text = _attempt_in_transaction(opened.con, sql)
                leaks += [(sql, secret) for secret in lake.secrets if secret in text]
                if outcome != "refused" and signature[0] in name_takers:
                    reached.append((sql, outcome, text[:200]))
    known = {"pragma_storage_info", "pragma_table_info", "duckdb_table_sample", "histogram", "storage_info"}
    assert len(signatures) > 50 and known <= name_takers, sorted(name_takers)
    assert leaks == [], "a query gave back the key or the catalog's metadata"
    assert reached == [], f"a function that takes a table by name ran on the catalog's metadata: {reached}"


def _sql(lake: CatalogLake, query: str):
    return runner.invoke(app, ["sql", query, "--state-dir", str(lake.state), "--catalog", lake.catalog])


REACH_REFUSAL = (
    "viewmill sql cannot read the lake catalog's own database __ducklake_metadata_lake ({}): it holds DuckLake's "
    "bookkeeping (files, snapshots), not the lake's tables; " + METADATA_HINT
)
# What main let through on a DuckDB-file catalog, and spellings around it.
REPRESENTATIVES = [
    "SELECT * FROM pragma_storage_info('__ducklake_metadata_lake.viewmill_lake_key')",
    "SELECT * FROM histogram('__ducklake_metadata_lake.viewmill_lake_key', key)",
    "SELECT * FROM duckdb_table_sample('__ducklake_metadata_lake.ducklake_data_file')",
    "SELECT * FROM pragma_table_info(concat('__DuckLake_Metadata', '_lake.', 'viewmill_lake_key'))",
    "SELECT * FROM pragma_metadata_info('__ducklake_metadata_lake')",
]


# A table macro names the table in its body, not as an argument: a SQLite or PostgreSQL
# catalog's table then shows in the plan as its scanner, refused as a file or server read.
MACRO_REFUSALS = {
    "sqlite": f"viewmill sql cannot run sqlite_scan() ({{}}): it {Use.FILES}; {READ_HINT}",
    "postgres": "viewmill sql cannot check this query's plan (PostgresScanSerialize), so it does not run it: query "
    "the lake's tables (reading files other than the lake's Parquet, e.g. FROM 'file.csv', is refused)",
}


@pytest.mark.parametrize("query", REPRESENTATIVES)
def test_representative_reaches_are_refused_with_one_message_and_exit_2(lake, query):
    result = _sql(lake, query)
    assert result.exit_code == 2 and result.stdout == "", result.output
    kind = lake.catalog.partition(":")[0]
    expected = MACRO_REFUSALS[kind] if "histogram" in query and kind in MACRO_REFUSALS else REACH_REFUSAL
    assert " ".join(result.output.split()) == "error: " + expected.format(repr(query[:60]))
    assert not [secret for secret in lake.secrets if secret in result.output]


DIRECT_READS = [
    "SELECT * FROM __ducklake_metadata_lake.viewmill_lake_key",
    'SELECT key FROM __ducklake_metadata_lake.main."VIEWMILL_LAKE_KEY"',
    "WITH k AS (FROM __ducklake_metadata_lake.viewmill_lake_key) SELECT * FROM k",
    "SUMMARIZE __ducklake_metadata_lake.viewmill_lake_key",
    "SELECT * FROM (FROM __ducklake_metadata_lake.ducklake_metadata)",
]


@pytest.mark.parametrize("query", DIRECT_READS)
def test_reading_a_metadata_table_by_name_is_refused(lake, query):
    """Read directly: the DuckDB-file catalog's tables are the catalog's own (refused as such); a
    SQLite or PostgreSQL catalog's are read through its scanner, refused as a file or server read
    (or not found: PostgreSQL's schema is not `main`)."""
    result = _sql(lake, query)
    message = " ".join(result.output.split())
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert message.startswith(("error: viewmill sql cannot ", "error: query failed: ")), message
    if lake.catalog == "duckdb":
        assert "cannot read the lake catalog's own database __ducklake_metadata_lake" in message
    assert not [secret for secret in lake.secrets if secret in result.output]


def test_the_lakes_own_tables_and_ducklakes_views_still_read(lake):
    for query, expected in (("SELECT count(*) AS n FROM sentences", "3"),
                            ("SELECT count(*) AS n FROM ducklake_snapshots('lake')", None),
                            ("SELECT count(*) AS n FROM pragma_storage_info('sentences')", None),
                            ("SELECT count(*) AS n FROM pragma_table_info('lake.main.sentences')", "7")):  # fmt: skip
        result = runner.invoke(
            app, ["sql", query, "--state-dir", str(lake.state), "--catalog", lake.catalog, "--format", "csv"]
        )
        assert result.exit_code == 0, (query, result.output)
        if expected is not None:
            assert result.stdout == f"n\n{expected}\n", query


def test_a_record_forged_with_what_queries_give_back_does_not_pass_verify(tmp_path):
    """The attack of issue 30 on a DuckDB-file catalog whose key is still in it (as on main): read
    what the key's table gives to every query above, sign a record for a changed file with each
    64-hex string found (and a guess), and verify still reports the change. Signed with the real
    key, the same forgery passes: the key's secrecy is all that stops it."""
    root = small_lake(tmp_path / "lake", n=1, catalog="duckdb")
    key = move_key_into_catalog(root, "duckdb")
    seen = " ".join(
        runner.invoke(app, ["sql", q, "--state-dir", str(tmp_path), "--catalog", "duckdb"]).output
        for q in [*REPRESENTATIVES, *DIRECT_READS]
    )
    candidates = sorted(set(re.findall(r"[0-9a-f]{64}", seen)) | {"00" * 32})
    assert key not in candidates
    with Lake(root, read_only=True, catalog="duckdb") as opened:
        (entry,) = [f for f in catalog_files(opened.con, opened.data_path) if f.table == "sentences"]
    change_in_place(entry.location, b"sentence 0", b"sentence X")
    data = Path(entry.location).read_bytes()
    size, sha = len(data), hashlib.sha256(data).hexdigest()
    forged = root / "data" / RECORD_DIR / "999999999999-forged.json"
    for candidate in [*candidates, key]:
        sig = hmac.new(bytes.fromhex(candidate), f"{entry.rel}\n{size}\n{sha}".encode(), "sha256").hexdigest()
        record = {"rel": entry.rel, "size": size, "sha256": sha, "table": "sentences", "kind": "data",
                  "file_id": entry.file_id, "sig": sig}  # fmt: skip
        forged.write_text(json.dumps(record) + "\n")
        result = runner.invoke(app, ["lake", "verify", "--state-dir", str(tmp_path), "--catalog", "duckdb"])
        if candidate != key:
            assert result.exit_code == 1, result.output
            assert f"content    sentences        {entry.location}: sha256 {sha[:16]} ({size} bytes)" in result.output
    assert result.exit_code == 0 and "lake ok" in result.output, "with the real key the forgery would pass"
