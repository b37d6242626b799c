"""A content hash of every data and delete file viewmill writes, checked before its rows
are trusted: by `viewmill lake verify`, before pairing, training and compaction, and by
`viewmill lake repair` before it takes an orphaned file back.

Where the record lives, and why. DuckLake writes the Parquet files itself and its catalog
has no content hash, so after each commit (under the writer lock) viewmill hashes the files
that commit added (sha256 of the whole file) and writes one small JSON-lines record file per
commit to `<data path>/_viewmill/file-hashes/`:

- beside the data, not in the catalog: restoring an older catalog backup must not forget
  the hashes of files written after it, or repair could not tell those files (viewmill's,
  to be taken back) from one dropped into the folder (never adopted). A record in the data
  path also reaches every writer of a PostgreSQL catalog and s3:// data paths, which a
  sidecar in one machine's state directory would not;
- signed: each entry carries an HMAC-SHA256 of (path, size, sha256) under a random key kept
  in a file of the lake's state folder, never in a database a query attaches (`lake_key`).
  Entries copied from another lake, or written by someone who can write the data folder but
  not read the key, do not verify and are ignored.

A file listed by the catalog with no valid entry is "unhashed" (written by an older viewmill
or outside viewmill's write path): it is reported, and trusted only when asked
(`viewmill lake verify --record-hashes`), never silently.
"""

from __future__ import annotations

import hmac
import json
import os
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa
from viewmill.storage.catalog import sql_literal
from viewmill.storage.lake_files import OWN_FOLDER, CatalogFile, content_sha256, file_size, is_remote, join

RECORD_DIR = f"{OWN_FOLDER}/file-hashes"
RECORD_COLUMNS = {"rel": "VARCHAR", "size": "BIGINT", "sha256": "VARCHAR", "table": "VARCHAR",
                  "kind": "VARCHAR", "file_id": "BIGINT", "sig": "VARCHAR"}  # fmt: skip


def _signature(key: bytes, rel: str, size: int, sha256: str) -> str:
    return hmac.new(key, f"{rel}\n{size}\n{sha256}".encode(), "sha256").hexdigest()


@dataclass(frozen=True)
class Digest:
    size: int
    sha256: str


def digest_of(con: duckdb.DuckDBPyConnection, location: str) -> Digest | None:
    """Size and sha256 of a file as it is now; None when it is gone."""
    size = file_size(con, location)
    sha = content_sha256(con, location) if size is not None else None
    return Digest(size, sha) if size is not None and sha is not None else None


def record_files(
    con: duckdb.DuckDBPyConnection, data_path: str, files: Iterable[CatalogFile], key: bytes
) -> list[CatalogFile]:
    """Hash `files` as they are now and add them to the record; returns those recorded (a file
    already gone is skipped: verify reports it missing)."""
    entries, recorded = [], []
    for entry in files:
        digest = digest_of(con, entry.location)
        if digest is None:
            continue
        sig = _signature(key, entry.rel, digest.size, digest.sha256)
        entries.append({"rel": entry.rel, "size": digest.size, "sha256": digest.sha256, "table": entry.table,
                        "kind": entry.kind, "file_id": entry.file_id, "sig": sig})  # fmt: skip
        recorded.append(entry)
    if entries:
        _write_record(con, data_path, entries)
    return recorded


def record_written(con: duckdb.DuckDBPyConnection, data_path: str, rels: Iterable[str], key: bytes) -> None:
    """Hash files a transaction wrote, by their path relative to the data path, before it
    commits (catalog entries and ids come only with the commit); a file that never commits is
    listed by no catalog entry, so its record vouches for nothing."""
    entries = []
    for rel in rels:
        digest = digest_of(con, join(data_path, rel))
        if digest is not None:
            sig = _signature(key, rel, digest.size, digest.sha256)
            entries.append({"rel": rel, "size": digest.size, "sha256": digest.sha256, "table": None,
                            "kind": "written", "file_id": 0, "sig": sig})  # fmt: skip
    if entries:
        _write_record(con, data_path, entries)


def _write_record(con: duckdb.DuckDBPyConnection, data_path: str, entries: list[dict]) -> None:
    """One new record file, whole or not at all: a local file is written aside, synced and
    renamed; an s3:// object appears only when its upload completes."""
    name = f"{max(e['file_id'] for e in entries):012d}-{uuid.uuid4().hex}.json"
    target = join(join(data_path, RECORD_DIR), name)
    if is_remote(target):
        con.register("_viewmill_hashes", pa.Table.from_pylist(entries))
        try:
            con.execute(f"COPY _viewmill_hashes TO {sql_literal(target)} (FORMAT json)")
        finally:
            con.unregister("_viewmill_hashes")
        return
    path = Path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    with partial.open("w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(e, sort_keys=True) + "\n" for e in entries)
        handle.flush()
        os.fsync(handle.fileno())
    partial.replace(path)


@dataclass
class HashRecords:
    """What the record says of each file (by path relative to the data path)."""

    known: dict[str, set[Digest]] = field(default_factory=dict)
    foreign: int = 0  # entries whose signature is not this lake's: ignored
    keyless: bool = False  # the lake has no key yet: nothing can be trusted

    def matches(self, rel: str, digest: Digest) -> bool:
        return digest in self.known.get(rel, set())

    def has(self, rel: str) -> bool:
        return rel in self.known


def read_records(con: duckdb.DuckDBPyConnection, data_path: str, key: bytes | None) -> HashRecords:
    """Every signed entry under the data path's record folder."""
    records = HashRecords(keyless=key is None)
    for rel, size, sha, sig in _record_rows(con, data_path):
        if key is not None and hmac.compare_digest(str(sig), _signature(key, rel, int(size), sha)):
            records.known.setdefault(rel, set()).add(Digest(int(size), sha))
        else:
            records.foreign += 1
    return records


def has_records(con: duckdb.DuckDBPyConnection, data_path: str) -> bool:
    """Whether anything was ever signed for this data path (a record file exists)."""
    folder = join(data_path, RECORD_DIR)
    if not is_remote(folder):
        return Path(folder).is_dir() and any(Path(folder).glob("*.json"))
    return con.execute("SELECT count(*) FROM glob(?)", [join(folder, "*.json")]).fetchone()[0] > 0


def _record_rows(con: duckdb.DuckDBPyConnection, data_path: str) -> list[tuple]:
    folder = join(data_path, RECORD_DIR)
    if not is_remote(folder):
        rows = []
        for path in sorted(Path(folder).glob("*.json")) if Path(folder).is_dir() else []:
            try:
                lines = path.read_text(encoding="utf-8").splitlines()
            except FileNotFoundError:  # replaced by a concurrent consolidation
                continue
            for line in lines:
                e = json.loads(line)
                rows.append((e["rel"], e["size"], e["sha256"], e["sig"]))
        return rows
    names = [r[0] for r in con.execute("SELECT file FROM glob(?)", [join(folder, "*.json")]).fetchall()]
    if not names:
        return []
    columns = "{" + ", ".join(f"'{k}': '{v}'" for k, v in RECORD_COLUMNS.items()) + "}"
    query = f"SELECT rel, size, sha256, sig FROM read_json(?, format = 'newline_delimited', columns = {columns})"
    return con.execute(query, [names]).fetchall()


@dataclass(frozen=True)
class ContentProblem:
    file: CatalogFile
    kind: str  # missing | content | unhashed
    detail: str


def content_problem(con: duckdb.DuckDBPyConnection, entry: CatalogFile, records: HashRecords) -> ContentProblem | None:
    """Whether a listed file still holds the bytes viewmill recorded when it wrote it."""
    digest = digest_of(con, entry.location)
    if digest is None:
        return ContentProblem(entry, "missing", f"{entry.kind} file of {entry.rows} rows is gone")
    if records.matches(entry.rel, digest):
        return None
    if records.has(entry.rel):
        recorded = " or ".join(f"{d.sha256[:16]} ({d.size} bytes)" for d in records.known[entry.rel])
        detail = (
            f"sha256 {digest.sha256[:16]} ({digest.size} bytes), not the {recorded} recorded when viewmill wrote it"
        )
        return ContentProblem(entry, "content", detail)
    return ContentProblem(
        entry, "unhashed", "no recorded content hash (written by an older viewmill, or outside viewmill)"
    )


def content_problems(
    con: duckdb.DuckDBPyConnection, files: Sequence[CatalogFile], records: HashRecords
) -> list[ContentProblem]:
    return [p for p in (content_problem(con, entry, records) for entry in files) if p is not None]


def refusal(problems: Sequence[ContentProblem], purpose: str) -> str:
    """The message a stage refuses with: the first damaged file, how many, and the fix."""
    first = problems[0]
    more = f" (and {len(problems) - 1} more file(s))" if len(problems) > 1 else ""
    where = f"the {first.file.table} {first.file.kind} file {first.file.location}"
    if all(p.kind == "unhashed" for p in problems):
        return (
            f"cannot {purpose}: {where}{more} has no recorded content hash (written by an older viewmill, or "
            "outside viewmill), so its rows cannot be trusted: check the lake with `viewmill lake verify`, then "
            "trust today's content with `viewmill lake verify --record-hashes`, and rerun"
        )
    bad = next(p for p in problems if p.kind != "unhashed")
    where = f"the {bad.file.table} {bad.file.kind} file {bad.file.location}"
    return (
        f"cannot {purpose}: {where}{more} {'is missing' if bad.kind == 'missing' else 'changed'} since viewmill "
        f"wrote it ({bad.detail}): run `viewmill lake verify` to list the damage and `viewmill lake repair` to "
        "set the damaged files aside (intact rows are kept), then rerun the recipe to remake what was lost"
    )
