"""Ad hoc SQL over the lake (`viewmill sql`) that can read but never write or reach out.

Two layers, because neither is enough alone: only SELECT-like statements run (ATTACH,
COPY, INSTALL, LOAD, SET, CREATE ... are refused by type before anything executes), and
the connection itself is locked down (no file access outside the lake's data files, no
extension loading, settings locked) so a statement type DuckDB adds later cannot escape.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
from viewmill.storage.lake import Lake, LakeError

# DESCRIBE, SHOW, SUMMARIZE, PRAGMA and FROM-first queries parse as SELECT.
ALLOWED_STATEMENTS = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}


class QueryRefused(LakeError):
    """A statement that ad hoc SQL may not run; the message names it."""


def check_read_only(query: str) -> None:
    """Refuse any statement that is not a read (checked before the query runs)."""
    try:
        statements = duckdb.extract_statements(query)
    except duckdb.Error as exc:
        raise QueryRefused(f"query failed: {exc}") from None
    if not statements:
        raise QueryRefused('the query is empty: give a SELECT, e.g. viewmill sql "SELECT count(*) FROM views"')
    for statement in statements:
        if statement.type not in ALLOWED_STATEMENTS:
            kind = statement.type.name
            raise QueryRefused(
                f"viewmill sql is read-only: {kind} statements are not allowed ({statement.query.strip()[:60]!r}); "
                "use SELECT (or DESCRIBE, SHOW, SUMMARIZE, EXPLAIN), and write files with `viewmill lake export`"
            )


def lock_down(lake: Lake) -> None:
    """No file access except the lake's own data files, no extensions, settings locked."""
    con = lake.con
    data = lake.data_path.rstrip("/") + "/"
    if not data.startswith("s3://"):
        data = str(Path(data).resolve()) + "/"
    con.execute("SET allowed_directories = ?", [[data]])
    for setting in (
        "autoinstall_known_extensions", "autoload_known_extensions", "allow_community_extensions",
        "enable_external_access",
    ):  # fmt: skip
        con.execute(f"SET {setting} = false")
    con.execute("SET lock_configuration = true")


def open_query_lake(root: Path | str, catalog: str | None = None) -> Lake:
    """The lake, read-only and locked down for ad hoc queries."""
    lake = Lake(root, read_only=True, catalog=catalog)
    try:
        lock_down(lake)
    except BaseException:
        lake.close()
        raise
    return lake


def run_query(root: Path | str, query: str, catalog: str | None = None) -> pa.Table:
    """Run a read-only ad hoc query over the lake; QueryRefused for anything that would write."""
    check_read_only(query)
    with open_query_lake(root, catalog) as lake:
        return lake.arrow(query)
