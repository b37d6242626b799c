"""Whether a query may run in `viewmill sql`: one statement, a plain query, and every pragma,
function and plan operator in it allowed by `policy`.

Checked with DuckDB's own tokenizer (where each statement starts), parser (extract_statements,
json_serialize_sql: the syntax tree) and binder (json_serialize_plan: the plan, where views,
macros and replacement scans such as FROM 'file.csv' show what they really call), never by
matching the text. Parsing and binding happen on the locked-down connection, so whatever
DuckDB does while parsing (PRAGMA rewrites, IMPORT DATABASE reads) cannot reach a file either.

The catalog's own database (DuckLake attaches it beside the lake: in place for a DuckDB-file or
PostgreSQL catalog) is out of reach as a class, not by table name: no bound plan may scan a
table of it, and no table function or pragma may be given its name (the plan holds the
arguments as bound, so a name built by concat() or a macro is seen as DuckDB sees it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import duckdb
from viewmill.storage.catalog import LakeError, sql_literal
from viewmill.storage.lake import CATALOG_NAME
from viewmill.storage.sql.policy import PRAGMAS, READ_OPERATORS, START_KEYWORDS, Use, function_use

READ_HINT = (
    "use SELECT (or DESCRIBE, SHOW, SUMMARIZE, EXPLAIN); write a result with --output FILE, "
    "a pairs snapshot with `viewmill lake export`"
)
_QUERY_TYPES = (duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN)
_WORD = re.compile(r"\w+|\S")
_EXPLAIN_OPTIONS = (
    "EXPLAIN takes no options in viewmill sql ({}): write EXPLAIN or EXPLAIN ANALYZE and then the query, "
    "e.g. EXPLAIN ANALYZE SELECT count(*) FROM views"
)
# The databases a query may bind: the lake, and DuckDB's own (functions, the empty default and
# temporary schemas). "": a table function's bind data that names no database.
QUERY_DATABASES = frozenset({CATALOG_NAME, "system", "temp", "memory", ""})
METADATA = "__ducklake_metadata_"  # DuckLake's name for the catalog database it attaches: + the lake's name
METADATA_HINT = (
    "query the lake's tables (SHOW TABLES), or DuckLake's own views of its catalog, e.g. "
    "ducklake_snapshots('lake'), ducklake_list_files('lake', 'views')"
)


class QueryRefused(LakeError):
    """A statement that ad hoc SQL may not run; the message names it and what to run instead."""


def checked_query(con: duckdb.DuckDBPyConnection, query: str) -> str:
    """The SQL to run for `query`, once every check has passed (QueryRefused otherwise).

    What runs is what was checked: the parsed statement's own text, or for EXPLAIN, the
    checked query behind a plain EXPLAIN [ANALYZE]."""
    statement = _one_statement(con, query)
    if statement.type == duckdb.StatementType.EXPLAIN:
        prefix, inner = _explained(statement.query)
        try:
            explained = _one_statement(con, inner)
        except QueryRefused:
            if not inner.startswith("("):
                raise
            raise QueryRefused(_EXPLAIN_OPTIONS.format(_snippet(statement.query))) from None
        if explained.type != duckdb.StatementType.SELECT:
            _refuse_kind(f"EXPLAIN {explained.type.name}", inner)
        return f"{prefix} {_checked_select(con, explained.query)}"
    return _checked_select(con, statement.query)


def _one_statement(con: duckdb.DuckDBPyConnection, query: str) -> duckdb.Statement:
    _check_statement_starts(query)
    try:
        statements = con.extract_statements(query)
    except duckdb.Error as exc:
        raise QueryRefused(f"query failed: {exc}") from None
    if not statements:
        raise QueryRefused('the query is empty: give a SELECT, e.g. viewmill sql "SELECT count(*) FROM views"')
    for statement in statements:
        if not statement.query.strip():  # one DuckDB made up, e.g. the enum type a dynamic PIVOT creates
            raise QueryRefused(
                "this query makes DuckDB run statements of its own first (a PIVOT without an IN list creates a "
                "type): list the values, e.g. PIVOT views ON status IN ('kept', 'rejected') USING count(*)"
            )
        if statement.type not in _QUERY_TYPES:
            _refuse_kind(statement.type.name, statement.query)
    if len(statements) > 1:
        listed = "; ".join(_snippet(s.query.strip().rstrip(";")) for s in statements)
        raise QueryRefused(
            f"viewmill sql runs one statement at a time, and the query holds {len(statements)} ({listed}): "
            "run them one by one"
        )
    return statements[0]


def _tokens(query: str) -> list[tuple[int, str, bool]]:
    """(offset, text, is a keyword) of each token: DuckDB's tokenizer says where each starts and
    what it is; the text is the word or single symbol there (comments and spaces left out)."""
    try:
        found = duckdb.tokenize(query)
    except duckdb.Error as exc:
        raise QueryRefused(f"query failed: {exc}") from None
    tokens = []
    for offset, kind in found:
        word = _WORD.match(query, offset)
        tokens.append((offset, word.group(0).lower() if word else "", kind == duckdb.token_type.keyword))
    return tokens


def _check_statement_starts(query: str) -> None:
    """Every statement must start as a query does, before DuckDB's parser (which runs PRAGMA
    rewrites and IMPORT DATABASE's file reads) sees anything else."""
    tokens = _tokens(query)
    for i, (offset, word, keyword) in enumerate(tokens):
        if (i > 0 and tokens[i - 1][1] != ";") or word == ";":
            continue
        if keyword and word not in START_KEYWORDS:  # not a keyword: a typo, which the parser reports
            _refuse_kind(word.upper(), query[offset:])
        if word == "pragma":
            _check_pragma(tokens[i + 1 : i + 3], query[offset:])


def _check_pragma(following: list[tuple[int, str, bool]], text: str) -> None:
    name = following[0][1] if following else ""
    if len(following) > 1 and following[1][1] == "=":
        _refuse_kind("SET", text)  # PRAGMA name = value is DuckDB's other spelling of SET
    use = PRAGMAS.get(name)
    if use is Use.ALLOWED:
        return
    reason = f"it {use}" if use else "viewmill's sandbox policy does not know it (storage/sql/policy.py)"
    allowed = ", ".join(sorted(n for n, u in PRAGMAS.items() if u is Use.ALLOWED))
    raise QueryRefused(
        f"viewmill sql cannot run PRAGMA {name} ({_snippet(text)}): {reason}; the pragmas that read are: {allowed}"
    )


def _explained(text: str) -> tuple[str, str]:
    """`EXPLAIN [ANALYZE] query` split into its prefix and the query (which may be in parentheses:
    `(FORMAT json) SELECT ...`, an option list, does not parse as one and is refused by the caller)."""
    tokens = _tokens(text)
    skip = 2 if len(tokens) > 1 and tokens[1][1] in ("analyze", "analyse") else 1
    if len(tokens) <= skip:
        raise QueryRefused(_EXPLAIN_OPTIONS.format(_snippet(text)))
    return ("EXPLAIN ANALYZE" if skip == 2 else "EXPLAIN"), text[tokens[skip][0] :]


def _checked_select(con: duckdb.DuckDBPyConnection, sql: str) -> str:
    tree = _serialized(con, "json_serialize_sql", sql)
    for name, table in _tree_calls(tree):
        _check_function(name, table, sql)
    plan = _serialized(con, "json_serialize_plan", sql)
    _check_catalog_reach(plan, sql)
    for kind, name in _plan_parts(plan):
        if kind != "operator":
            _check_function(name, kind == "table", sql)
        elif name not in READ_OPERATORS:
            raise QueryRefused(
                f"viewmill sql cannot run this query ({_snippet(sql)}): its plan holds {name}, which is not a read; "
                f"{READ_HINT}"
            )
    return sql


def _serialized(con: duckdb.DuckDBPyConnection, function: str, sql: str) -> Any:
    # The query as a quoted literal, not a parameter: any parameter makes DuckDB import pandas,
    # 0.5 s of every `viewmill sql`. Quoting is exact except for NUL, which DuckDB's parser
    # stops at: such a query goes as a parameter (it is refused either way).
    if "\x00" in sql:
        found = json.loads(con.execute(f"SELECT {function}(?)", [sql]).fetchone()[0])
    else:
        found = json.loads(con.execute(f"SELECT {function}({sql_literal(sql)})").fetchone()[0])
    if not found.get("error"):
        return found
    kind, message = found.get("error_type", ""), str(found.get("error_message", found))
    if kind == "permission":
        raise QueryRefused(f"viewmill sql reads only the lake's tables and its data folder: {message}")
    if kind == "not implemented" or "serializ" in message.lower():  # a plan this check cannot see through
        raise QueryRefused(
            f"viewmill sql cannot check this query's plan ({message}), so it does not run it: query the lake's "
            "tables (reading files other than the lake's Parquet, e.g. FROM 'file.csv', is refused)"
        )
    raise QueryRefused(f"query failed: {message}")


def _check_function(name: str, table: bool, sql: str) -> None:
    use = function_use(name, table=table)
    if use is Use.ALLOWED:
        return
    reason = f"it {use}" if use else "viewmill's sandbox policy does not know it (storage/sql/policy.py)"
    raise QueryRefused(f"viewmill sql cannot run {name}() ({_snippet(sql)}): {reason}; {READ_HINT}")


def _tree_calls(node: Any) -> Iterator[tuple[str, bool]]:
    """(name, is a table function) of every function the syntax tree calls."""
    if isinstance(node, list):
        for item in node:
            yield from _tree_calls(item)
    elif isinstance(node, dict):
        function = node.get("function")
        if node.get("type") == "TABLE_FUNCTION" and isinstance(function, dict):
            yield str(function.get("function_name", "")), True
            node = {**node, "function": list(function.values())}  # its arguments, walked below
        elif "function_name" in node:
            yield str(node["function_name"]), False
        for value in node.values():
            yield from _tree_calls(value)


def _check_catalog_reach(plan: Any, sql: str) -> None:
    """Refuse a plan that binds a table or function of any database but the lake and DuckDB's own,
    or gives a table function the name of DuckLake's metadata database (hidden from
    duckdb_databases(), so known by the prefix DuckLake names it with): the catalog's file list,
    snapshots and, in a lake no writer has opened since the key file, the signing key."""
    for where, text in _plan_names(plan):
        folded = text.casefold()
        if (where == "catalog" and folded not in QUERY_DATABASES) or (where == "argument" and METADATA in folded):
            name = text if where == "catalog" else f"{METADATA}{CATALOG_NAME}"
            raise QueryRefused(
                f"viewmill sql cannot read the lake catalog's own database {name} ({_snippet(sql)}): it holds "
                f"DuckLake's bookkeeping (files, snapshots), not the lake's tables; {METADATA_HINT}"
            )


_ARGUMENTS = ("parameters", "named_parameters")


def _plan_names(node: Any, argument: bool = False) -> Iterator[tuple[str, str]]:
    """("catalog", name) for the database of every table and function the plan binds, and
    ("argument", text) for every string given to a table function (as bound: constants folded)."""
    if isinstance(node, list):
        for item in node:
            yield from _plan_names(item, argument)
    elif isinstance(node, dict):
        get = node.get("type") == "LOGICAL_GET"
        for key, value in node.items():
            if key in ("catalog", "catalog_name") and isinstance(value, str):
                yield "catalog", value
            yield from _plan_names(value, argument or (get and key in _ARGUMENTS))
    elif argument and isinstance(node, str):
        yield "argument", node


def _plan_parts(node: Any) -> Iterator[tuple[str, str]]:
    """("operator", type) for every plan operator, ("table", name) for the table function each
    scan runs (LOGICAL_GET) and ("function", name) for every function bound in the plan."""
    if isinstance(node, list):
        for item in node:
            yield from _plan_parts(item)
        return
    if not isinstance(node, dict):
        return
    kind = str(node.get("type", ""))
    bound = node.get("expression_class")
    # A window without a name is a built-in one (row_number, rank, lag...), not a function call.
    if bound in ("BOUND_FUNCTION", "BOUND_AGGREGATE") or (bound == "BOUND_WINDOW" and node.get("name") is not None):
        yield "function", str(node.get("name", ""))
    elif bound is None and kind.startswith("LOGICAL_"):
        yield "operator", kind
        if kind == "LOGICAL_GET":
            yield "table", str(node.get("name", ""))
    for value in node.values():
        yield from _plan_parts(value)


def _refuse_kind(kind: str, text: str) -> None:
    raise QueryRefused(f"viewmill sql is read-only: {kind} statements are not allowed ({_snippet(text)}); {READ_HINT}")


def _snippet(text: str) -> str:
    return repr(" ".join(text.split())[:60])
