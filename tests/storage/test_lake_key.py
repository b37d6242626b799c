"""The key that signs the lake's file hashes lives in an owner-only file of the state folder, not
in any database a query attaches: made with the lake, moved out of an older lake's catalog by the
first writer (same bytes: its records keep verifying), and asked for by name when it is missing
or another lake's (real lakes: SQLite, DuckDB-file and PostgreSQL catalogs)."""

from __future__ import annotations

import re
import sqlite3
import stat
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from viewmill.storage.integrity import verify_lake
from viewmill.storage.lake import Lake, LakeError
from viewmill.storage.lake_key import KEY_FILE, key_id, key_path
from viewmill.storage.schema import VIEWS

from tests.lake_state import move_key_into_catalog, small_lake
from tests.postgres import needs_postgres


def _catalog_tables(root: Path, catalog: str) -> dict[str, list[tuple]]:
    """Every table of a local catalog database and its rows, read with the database's own client."""
    if catalog == "sqlite":
        with sqlite3.connect(root / "catalog.sqlite") as con:
            names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            return {name: con.execute(f'SELECT * FROM "{name}"').fetchall() for name in names}
    with duckdb.connect(str(root / "catalog.ducklake"), read_only=True) as con:
        names = [r[0] for r in con.execute("SHOW TABLES").fetchall()]
        return {name: con.execute(f'SELECT * FROM "{name}"').fetchall() for name in names}


def _file_key(root: Path) -> str:
    text = key_path(root).read_text(encoding="ascii")
    assert re.fullmatch(r"[0-9a-f]{64}\n", text), text
    assert stat.S_IMODE(key_path(root).stat().st_mode) == 0o600
    return text.strip()


@pytest.mark.parametrize("catalog", ["sqlite", "duckdb"])
def test_a_new_lake_keeps_its_key_in_an_owner_only_file_and_only_its_id_in_the_catalog(tmp_path, catalog):
    root = small_lake(tmp_path / "lake", catalog=catalog)
    key = _file_key(root)
    tables = _catalog_tables(root, catalog)
    assert "viewmill_lake_key" not in tables
    assert tables["viewmill_lake_key_id"] == [(key_id(bytes.fromhex(key)),)]
    catalog_bytes = b"".join(p.read_bytes() for p in root.glob("catalog.*"))
    assert key.encode() not in catalog_bytes and bytes.fromhex(key) not in catalog_bytes
    with Lake(root, read_only=True, catalog=catalog) as lake:
        report = verify_lake(lake)
    assert report.ok and report.files == 1 and report.foreign_records == 0


@pytest.mark.parametrize("catalog", ["sqlite", "duckdb"])
def test_an_older_lakes_key_moves_from_its_catalog_into_the_file_on_the_first_writer_open(tmp_path, catalog):
    root = small_lake(tmp_path / "lake", catalog=catalog)
    key = move_key_into_catalog(root, catalog)
    assert _catalog_tables(root, catalog)["viewmill_lake_key"] == [(key,)]
    with Lake(root, read_only=True, catalog=catalog) as lake:  # readers use the catalog's key meanwhile
        before = verify_lake(lake)
    assert before.ok and before.foreign_records == 0 and not key_path(root).exists()
    with Lake(root, catalog=catalog) as lake:
        after = verify_lake(lake)
    assert after.ok and after.files == 1 and after.foreign_records == 0, "the same key: old records still verify"
    assert _file_key(root) == key
    tables = _catalog_tables(root, catalog)
    assert "viewmill_lake_key" not in tables and tables["viewmill_lake_key_id"] == [(key_id(bytes.fromhex(key)),)]


def test_a_migration_cut_short_is_finished_by_the_next_writer(tmp_path):
    """The file was written, the catalog table not yet dropped: the next writer finishes the move."""
    root = small_lake(tmp_path / "lake")
    key = move_key_into_catalog(root, keep_file=True)
    with Lake(root) as lake:
        assert verify_lake(lake).ok
    assert _file_key(root) == key and "viewmill_lake_key" not in _catalog_tables(root, "sqlite")


def test_a_key_file_that_is_not_a_key_is_named(tmp_path):
    root = small_lake(tmp_path / "lake")
    key_path(root).write_text("not a key\n", encoding="ascii")
    with pytest.raises(LakeError) as refused:
        Lake(root)
    assert str(refused.value) == (
        f"the lake's signing key file {key_path(root)} does not hold a key (64 hex digits): restore it from a "
        "backup of the state directory"
    )


def _row(view_id: str, text: str) -> pa.Table:
    row = {"view_id": view_id, "sentence_id": "s0", "augmenter": "A", "config_hash": "hA", "text": text,
           "lang": "en", "status": "kept"}  # fmt: skip
    return pa.Table.from_pylist([row], schema=VIEWS)


@needs_postgres
def test_every_machine_writing_a_postgresql_catalog_lake_needs_the_same_key_file(tmp_path, postgres_dsn):
    """The key is not in PostgreSQL: a second state folder (another machine) without the key file
    is refused, naming its path, until it holds a copy; then both sign records the other checks."""
    import psycopg

    with psycopg.connect(postgres_dsn, autocommit=True) as server:
        server.execute("CREATE DATABASE lake_key")
    catalog = "postgres:" + postgres_dsn.replace("dbname=viewmill", "dbname=lake_key")
    first, second, data = tmp_path / "a" / "lake", tmp_path / "b" / "lake", str(tmp_path / "data")
    with Lake(first, catalog=catalog, data_path=data) as lake:
        lake.append("views", _row("A-s0", "first text"))
    key = _file_key(first)
    with psycopg.connect(postgres_dsn.replace("dbname=viewmill", "dbname=lake_key")) as db:
        tables = {r[0] for r in db.execute("SELECT table_name FROM information_schema.tables")}
        assert "viewmill_lake_key" not in tables and "viewmill_lake_key_id" in tables
        assert key not in repr(db.execute("SELECT * FROM viewmill_lake_key_id").fetchall())
    with pytest.raises(LakeError) as refused:
        Lake(second, catalog=catalog, data_path=data)
    assert str(refused.value) == (
        f"the lake's file-hash records are signed, but its signing key {second / KEY_FILE} is missing: restore "
        "that file from a backup of the state directory, or copy it from the state directory of a machine that "
        f"writes this lake (lake/{KEY_FILE}); if it is lost for good, move {data}/_viewmill/file-hashes aside and "
        "run `viewmill lake verify --record-hashes`, which trusts the files as they are now under a new key"
    )
    assert not key_path(second).exists(), "no second key made"
    second.mkdir(parents=True, exist_ok=True)
    key_path(second).write_bytes(key_path(first).read_bytes())
    with Lake(second, catalog=catalog, data_path=data) as lake:
        lake.append("views", _row("A-s1", "second text"))
    for root in (first, second):
        with Lake(root, read_only=True, catalog=catalog, data_path=data) as lake:
            report = verify_lake(lake)
        assert report.ok and report.files == 2 and report.foreign_records == 0, root
