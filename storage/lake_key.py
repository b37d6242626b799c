"""The key that signs the lake's file-hash records (`file_hashes`): a file in the lake's state
folder, `<state>/lake/lake.key`, never a table of a database that a query connection attaches.

Why a file. `viewmill sql` attaches the catalog database (a private copy of a SQLite catalog, a
DuckDB-file or PostgreSQL catalog in place), so a secret kept there is one missed check away
from a query. The file is owner-only (mode 0600 from its first byte), made once, atomically,
under the writer lock, and read only by writers and by the checks that verify records
(`lake verify`, the reads before pairing and training); `viewmill sql` never opens it. A copied
state folder carries it; several machines writing one PostgreSQL-catalog lake each need a copy.

Which key a lake has is no secret: its id (an HMAC of a fixed text under the key) is kept in
the catalog, so a process that lacks the file, or holds another lake's, is refused by name
instead of signing records no other writer can check.

Lakes made before the key moved kept it in the catalog (`viewmill_lake_key`): the first writer
to open such a lake moves it into the file (the same bytes, so its records keep verifying) and
drops the table; until then readers use the table's key.
"""

from __future__ import annotations

import hmac
import os
import re
import secrets
import uuid
from pathlib import Path

import duckdb
from viewmill.storage.catalog import LakeError
from viewmill.storage.file_hashes import RECORD_DIR, has_records
from viewmill.storage.lake_files import META, join

KEY_FILE = "lake.key"
LEGACY_TABLE = f"{META}.viewmill_lake_key"  # where lakes made before the key file kept it
ID_TABLE = f"{META}.viewmill_lake_key_id"


def key_path(root: Path | str) -> Path:
    return Path(root) / KEY_FILE


def key_id(key: bytes) -> str:
    """Names a key without revealing it."""
    return hmac.new(key, b"viewmill lake key id", "sha256").hexdigest()[:32]


def read_key_file(path: Path) -> bytes | None:
    """The key in `path`; None when there is no such file."""
    try:
        text = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise LakeError(
            f"cannot read the lake's signing key {path} ({type(exc).__name__}: {getattr(exc, 'strerror', None) or exc}"
            "): run this as the user who writes the lake, or restore the file from a backup of the state directory"
        ) from None
    if not re.fullmatch(r"[0-9a-f]{64}", text):
        raise LakeError(
            f"the lake's signing key file {path} does not hold a key (64 hex digits): restore it from a backup of "
            "the state directory"
        )
    return bytes.fromhex(text)


def settled_key(con: duckdb.DuckDBPyConnection, root: Path | str) -> bytes | None:
    """The key file's key when the catalog already names it (no writer lock needed); else None."""
    key = read_key_file(key_path(root))
    return key if key is not None and _recorded_id(con) == key_id(key) else None


def reader_key(con: duckdb.DuckDBPyConnection, root: Path | str, data_path: str) -> bytes | None:
    """The key that checks the lake's records; None for a lake with nothing signed and no key.
    LakeError when records are signed but this state folder lacks the key, or holds another."""
    path, recorded = key_path(root), _recorded_id(con)
    key = read_key_file(path) or _legacy_key(con)
    if key is None and recorded is not None and has_records(con, data_path):
        raise LakeError(_missing(path, data_path))
    if key is not None and recorded is not None and key_id(key) != recorded:
        raise LakeError(_foreign(path))
    return key


def writer_key(con: duckdb.DuckDBPyConnection, root: Path | str, data_path: str) -> bytes:
    """The lake's key for a writer, which holds the writer lock: the key file's; else the one an
    older lake keeps in its catalog, moved into the file; else, when nothing is signed yet, a new
    one. The catalog then names the key and keeps no copy of it."""
    path, recorded, legacy = key_path(root), _recorded_id(con), _legacy_key(con)
    key = read_key_file(path)
    if key is not None and legacy is not None and key != legacy:
        raise LakeError(_foreign(path))
    if key is None:
        if legacy is None and recorded is not None and has_records(con, data_path):
            raise LakeError(_missing(path, data_path))
        key = legacy or secrets.token_bytes(32)
        _write_key_file(path, key)
    elif recorded not in (None, key_id(key)) and has_records(con, data_path):
        raise LakeError(_foreign(path))
    if recorded != key_id(key):
        con.execute(f"DROP TABLE IF EXISTS {ID_TABLE}")
        con.execute(f"CREATE TABLE {ID_TABLE} (key_id VARCHAR)")
        con.execute(f"INSERT INTO {ID_TABLE} VALUES (?)", [key_id(key)])
    if legacy is not None:
        con.execute(f"DROP TABLE {LEGACY_TABLE}")
    return key


def _write_key_file(path: Path, key: bytes) -> None:
    """Whole or not at all, and owner-only from its first byte: a private file beside it,
    synced, then renamed into place (the caller holds the writer lock: no one else makes one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{uuid.uuid4().hex}.partial")
    try:
        handle = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(handle, "w", encoding="ascii") as out:
            out.write(key.hex() + "\n")
            out.flush()
            os.fsync(out.fileno())
        partial.replace(path)
    finally:
        partial.unlink(missing_ok=True)


def _select_one(con: duckdb.DuckDBPyConnection, sql: str) -> str | None:
    try:
        row = con.execute(sql).fetchone()
    except duckdb.CatalogException:  # no such table: a lake made before it existed
        return None
    return str(row[0]) if row else None


def _recorded_id(con: duckdb.DuckDBPyConnection) -> str | None:
    return _select_one(con, f"SELECT key_id FROM {ID_TABLE} LIMIT 1")


def _legacy_key(con: duckdb.DuckDBPyConnection) -> bytes | None:
    found = _select_one(con, f"SELECT key FROM {LEGACY_TABLE} LIMIT 1")
    return bytes.fromhex(found) if found else None


def _missing(path: Path, data_path: str) -> str:
    return (
        f"the lake's file-hash records are signed, but its signing key {path} is missing: restore that file from "
        "a backup of the state directory, or copy it from the state directory of a machine that writes this lake "
        f"(lake/{KEY_FILE}); if it is lost for good, move {join(data_path, RECORD_DIR)} aside and run "
        "`viewmill lake verify --record-hashes`, which trusts the files as they are now under a new key"
    )


def _foreign(path: Path) -> str:
    return (
        f"the signing key {path} is not the key this lake's catalog names (a key file from another lake?): put "
        "this lake's own lake.key there, from a backup of its state directory or from a machine that writes it"
    )
