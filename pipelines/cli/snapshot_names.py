"""`viewmill train --snapshot NAME` on a lake that cannot hold NAME, refused without DuckDB.

Looking a name up opens the lake (DuckDB, its extensions, pyarrow: over a second). Two cases
need no lookup: no lake at all, and a lake whose `snapshots` table holds no row yet, which a
SQLite catalog tells through Python's own sqlite3 (DuckLake's tables: a row lives in a data file
or inlined in the catalog). Anything else, or a catalog this cannot read, goes to the lookup.
"""

from __future__ import annotations

import os
import sqlite3
from contextlib import closing
from pathlib import Path

from viewmill.storage.catalog import DATA_PATH_ENV, Catalog, require_catalog, unknown_snapshot

# The `snapshots` table of the catalog's current version (its main schema).
_TABLE_ID = (
    "SELECT t.table_id FROM ducklake_table t JOIN ducklake_schema s USING (schema_id) "
    "WHERE s.schema_name = 'main' AND t.table_name = 'snapshots' AND t.end_snapshot IS NULL AND s.end_snapshot IS NULL"
)
_LIVE_FILE = "SELECT 1 FROM ducklake_data_file WHERE table_id = ? AND end_snapshot IS NULL LIMIT 1"
_INLINED = "SELECT table_name FROM ducklake_inlined_data_tables WHERE table_id = ?"


def refuse_snapshot_early(root: Path, snapshot: str, catalog: str | None, *, data_path: str | None) -> None:
    """LakeError when the lake at `root` is missing or has no pairs snapshot; returns when the
    name must be looked up in the lake. `data_path` None: VIEWMILL_DATA_PATH, else <root>/data."""
    spec = Catalog.parse(catalog, root)
    require_catalog(spec, data_path or os.environ.get(DATA_PATH_ENV) or str(root / "data"), root, read_only=True)
    if spec.kind == "sqlite" and _no_snapshot_rows(Path(spec.target)):
        raise unknown_snapshot(snapshot, [])


def _no_snapshot_rows(catalog_file: Path) -> bool:
    """True only when the SQLite catalog shows the `snapshots` table with no live data file and
    no inlined row; False when it has some, or the catalog's layout is not the one expected."""
    try:
        with closing(sqlite3.connect(f"{catalog_file.absolute().as_uri()}?mode=ro", uri=True)) as con:
            found = con.execute(_TABLE_ID).fetchall()
            if len(found) != 1:
                return False
            table_id = found[0][0]
            if con.execute(_LIVE_FILE, (table_id,)).fetchone():
                return False
            for (name,) in con.execute(_INLINED, (table_id,)).fetchall():
                quoted = '"' + name.replace('"', '""') + '"'
                if con.execute(f"SELECT 1 FROM {quoted} WHERE end_snapshot IS NULL LIMIT 1").fetchone():
                    return False
            return True
    except sqlite3.Error:  # locked, or another DuckLake version's tables: the lookup decides
        return False
