"""`WriterLock`: the lake's writers take turns, from before a transaction starts until it commits."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from viewmill.storage.catalog import Catalog, LakeError, lost_connection, redact

from viewmill.extras import require


class WriterLock:
    """Serialises the lake's writers from before a transaction starts until it commits.

    DuckLake retries concurrent appends instead of failing them, so two writers that
    check "which keys are new?" at the same time would both insert the same keys. Under
    this lock a writer's snapshot includes every earlier commit. Local catalogs use a
    file lock beside the catalog (filelock: flock on Unix, msvcrt on Windows); PostgreSQL
    an advisory lock held by its own session.
    """

    KEY = "hashtext('viewmill-lake-writer')"

    def __init__(self, catalog: Catalog, root: Path) -> None:
        self.catalog, self.root = catalog, root
        self._file = None
        self._pg = None  # one session per Lake, opened at the first write, not one per commit

    def acquire(self, on_wait: Callable[[], None] | None = None) -> None:
        """Take the lock, waiting for the writer that holds it; `on_wait` is called once first
        when another holds it (to say what this process waits for)."""
        if self.catalog.kind == "postgres":
            psycopg = require("psycopg", "a PostgreSQL catalog's writer lock")
            try:
                self._advisory_lock(psycopg, on_wait)
            except psycopg.Error as exc:
                raise lost_connection(self.catalog, exc) or LakeError(
                    f"cannot take the writer lock in the lake's PostgreSQL catalog {self.catalog.uri}: "
                    f"{redact(str(exc))}"
                ) from None
        else:
            import filelock  # a writer's only: a read-only lake (viewmill sql) never locks

            if self._file is None:
                self.root.mkdir(parents=True, exist_ok=True)
                # One lock per Lake shared by its threads (as the Lake's own depth counter is);
                # the file stays so no process ever locks a path another just unlinked.
                self._file = filelock.FileLock(self.root / "writer.lock", thread_local=False, preserve_lock_file=True)
            if on_wait is None:
                self._file.acquire()
                return
            try:
                self._file.acquire(timeout=0)
            except filelock.Timeout:
                on_wait()
                self._file.acquire()

    def _advisory_lock(self, psycopg, on_wait: Callable[[], None] | None) -> None:
        if self._pg is None or self._pg.closed:
            password = self.catalog.password.get_secret_value() if self.catalog.password else None
            extra = {"password": password} if password else {}
            self._pg = psycopg.connect(self.catalog.target, autocommit=True, **extra)
        got = self._pg.execute(f"SELECT pg_try_advisory_lock({self.KEY})").fetchone()
        if not (got and got[0]):
            if on_wait is not None:
                on_wait()
            self._pg.execute(f"SELECT pg_advisory_lock({self.KEY})")

    def release(self) -> None:
        if self._pg is not None and not self._pg.closed:
            try:
                self._pg.execute(f"SELECT pg_advisory_unlock({self.KEY})")
            except Exception:  # the session is gone, and the lock with it: the run's own error is the one to see
                self._pg.close()
                self._pg = None
        if self._file is not None and self._file.is_locked:
            self._file.release()

    def close(self) -> None:
        if self._pg is not None:
            self._pg.close()  # ends the session, which would drop a lock still held
            self._pg = None
        if self._file is not None:
            self._file.release(force=True)
            self._file = None
