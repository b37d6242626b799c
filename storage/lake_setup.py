"""A lake's catalog attached to a DuckDB connection, and its tables created or brought up to date.

Plain functions over a connection: `Lake` calls them when it opens.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
from viewmill.storage.catalog import (
    DATA_PATH_ENV,
    Catalog,
    LakeError,
    recorded_data_path,
    redact,
    s3_secret_sql,
    sql_literal,
)
from viewmill.storage.schema import JSON, PARTITIONS, SORTED, TABLES

CATALOG_NAME = "lake"
JSON_COLUMNS = [(name, field.name) for name, schema in TABLES.items() for field in schema if field.type == JSON]


def attach_catalog(
    con: duckdb.DuckDBPyConnection,
    catalog: Catalog,
    root: Path,
    data_path: str,
    *,
    read_only: bool,
    explicit_data: bool,
) -> str:
    """Attach the lake as `CATALOG_NAME` and use it, on a connection with `lake_extensions` loaded;
    returns the data path in use (the catalog's recorded one where the lake keeps its data elsewhere)."""
    _create_secrets(con, catalog, data_path)
    # Small commits still become Parquet files, so the data stays plain Parquet.
    options = ["READ_ONLY"] if read_only else ["DATA_INLINING_ROW_LIMIT 0"]
    if catalog.kind == "sqlite":
        # WAL: a reader never makes a writer's COMMIT fail with "database is locked"; the
        # busy timeout covers the catalog's own short locks (writers take turns anyway).
        options += ["META_BUSY_TIMEOUT 60000"] + ([] if read_only else ["META_JOURNAL_MODE 'WAL'"])
    try:
        data_path = _attach_with_data_path(con, catalog, data_path, options, explicit_data=explicit_data)
    except (duckdb.IOException, duckdb.CatalogException, duckdb.InvalidInputException) as exc:
        if "lock" in str(exc).lower():
            raise LakeError(
                f"the lake at {root} is locked by another process (a run in progress with a duckdb "
                "catalog?): wait for it to finish, or use the sqlite catalog, which lets readers in"
            ) from exc
        raise LakeError(f"cannot open the lake catalog {catalog.uri}: {redact(str(exc))}") from None
    con.execute(f"USE {CATALOG_NAME}")
    return data_path


def lake_extensions(catalog: Catalog, data_path: str) -> tuple[str, ...]:
    """The DuckDB extensions a lake needs loaded: DuckLake, its catalog's, httpfs for s3:// data."""
    s3 = ("httpfs",) if data_path.startswith("s3://") else ()
    return ("ducklake", *((catalog.extension,) if catalog.extension else ()), *s3)


def _create_secrets(con: duckdb.DuckDBPyConnection, catalog: Catalog, data_path: str) -> None:
    if data_path.startswith("s3://"):
        con.execute(s3_secret_sql())
    if catalog.password is not None:  # libpq gets it from a (temporary, redacted) DuckDB secret
        secret = sql_literal(catalog.password.get_secret_value())
        # The default postgres secret: the one an ATTACH without its own SECRET option uses.
        con.execute(f"CREATE OR REPLACE TEMPORARY SECRET __default_postgres (TYPE postgres, PASSWORD {secret})")


def _attach_with_data_path(
    con: duckdb.DuckDBPyConnection, catalog: Catalog, data_path: str, options: list[str], *, explicit_data: bool
) -> str:
    """Attach with this lake's own data folder. The catalog records the absolute path the
    lake was made at; a lake that was moved, copied or restored elsewhere keeps its data
    in `<root>/data`, so that folder overrides the recorded one and the copy reads and
    writes only its own files."""
    attach = f"ATTACH {sql_literal(catalog.uri)} AS {CATALOG_NAME}"
    data = data_path.rstrip("/") + "/"
    try:
        con.execute(f"{attach} ({', '.join([*options, f'DATA_PATH {sql_literal(data)}'])})")
        return data_path
    except duckdb.Error as exc:  # DuckLake raises a plain Error for a data path mismatch
        recorded = recorded_data_path(str(exc))
        if recorded is None:
            raise
    if explicit_data:
        raise LakeError(
            f"the catalog {catalog.target} records its data at {recorded} but {DATA_PATH_ENV} (or "
            f"--data-path) says {data}: point it at the lake's data, or unset it to use the recorded path"
        )
    own = Path(data_path)
    # A local catalog lives in `root`: when `root/data` holds files, catalog and data moved
    # together. A PostgreSQL catalog is shared, so its recorded path is the truth.
    if catalog.kind != "postgres" and own.is_dir() and any(own.iterdir()):
        override = [*options, f"DATA_PATH {sql_literal(data)}", "OVERRIDE_DATA_PATH true"]
        con.execute(f"{attach} ({', '.join(override)})")
        return data_path
    con.execute(f"{attach} ({', '.join(options)})")  # made with its data elsewhere (another folder, s3://)
    return recorded


def tables_current(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether every table and column exist, the JSON columns as JSON."""
    sql = "SELECT table_name, column_name, data_type FROM duckdb_columns() WHERE database_name = ?"
    have = {(table, column): kind for table, column, kind in con.execute(sql, [CATALOG_NAME]).fetchall()}
    if not {(name, field.name) for name, schema in TABLES.items() for field in schema} <= have.keys():
        return False
    return all(have[column] == "JSON" for column in JSON_COLUMNS)


def create_tables(con: duckdb.DuckDBPyConnection) -> None:
    """Create the missing tables; bring an existing one's columns up to its current schema."""
    existing = {row[0] for row in con.execute("SHOW TABLES").fetchall()}
    for name, schema in TABLES.items():
        if name in existing:
            _add_missing_columns(con, name, schema)
            _alter_to_json(con, name)
            continue
        empty = pa.Table.from_pylist([], schema=schema)
        con.register("_empty", empty)
        con.execute(f"CREATE TABLE {name} AS SELECT * FROM _empty LIMIT 0")
        con.unregister("_empty")
        set_layout(con, name)
        set_row_groups(con, name)


def set_layout(con: duckdb.DuckDBPyConnection, name: str) -> None:
    """A new (or re-created) table's partitions and sort order (row groups: `set_row_groups`,
    which a table created in the same transaction cannot take yet)."""
    if name in PARTITIONS:
        con.execute(f"ALTER TABLE {name} SET PARTITIONED BY ({', '.join(PARTITIONS[name])})")
    if name in SORTED:
        con.execute(f"ALTER TABLE {name} SET SORTED BY ({SORTED[name][0]} ASC)")


def set_row_groups(con: duckdb.DuckDBPyConnection, name: str) -> None:
    """A sorted table's row-group size, once the table is committed."""
    if name in SORTED:
        option = f"'parquet_row_group_size', {SORTED[name][1]}, table_name => {sql_literal(name)}"
        con.execute(f"CALL {CATALOG_NAME}.set_option({option})")


def _add_missing_columns(con: duckdb.DuckDBPyConnection, name: str, schema: pa.Schema) -> None:
    """Columns added to a table's schema since an existing lake was made (empty there)."""
    have = {row[0] for row in con.execute(f"DESCRIBE {name}").fetchall()}
    missing = [field for field in schema if field.name not in have]
    if not missing:
        return
    con.register("_empty", pa.Table.from_pylist([], schema=pa.schema(missing)))
    try:
        types = dict(con.execute("SELECT column_name, column_type FROM (DESCRIBE _empty)").fetchall())
    finally:
        con.unregister("_empty")
    for field in missing:
        con.execute(f"ALTER TABLE {name} ADD COLUMN {field.name} {types[field.name]}")


def _alter_to_json(con: duckdb.DuckDBPyConnection, name: str) -> None:
    """JSON columns an older lake holds as VARCHAR (runs.timings, runs.counts, models.train_config):
    DuckLake changes the type in the catalog only, and the old files' text reads as JSON."""
    types = dict(con.execute(f"SELECT column_name, column_type FROM (DESCRIBE {name})").fetchall())
    for table, column in JSON_COLUMNS:
        if table == name and types[column] == "VARCHAR":
            con.execute(f"ALTER TABLE {name} ALTER COLUMN {column} SET DATA TYPE JSON")
