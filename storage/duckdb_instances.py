"""In-memory DuckDB instances with a lake's extensions loaded, each lent to one open `Lake` at a time.

Loading an extension into a new DuckDB instance reads and verifies its signed file (tens of MB,
~60 ms an extension on a 2-core box), and every `Lake` used to open a new instance. An instance
whose lake closed is kept instead (a few per process) and lent to the next lake that needs the
same extensions, with nothing of the last lake left in it: its connection closed (temporary
objects, registrations, session settings, transaction), its catalogs detached, its secrets
dropped and the external file cache emptied. One whose global settings or loaded extensions
changed (a locked-down `viewmill sql` lake) is closed, never lent again.
"""

from __future__ import annotations

import os
import threading

import duckdb
from viewmill.storage.catalog import extension_path, sql_literal

IDLE_MAX = 2  # kept per process: a process seldom has more lakes open at once
_THREADS = max(1, os.cpu_count() or 1)
_idle: list[Instance] = []
_lock = threading.Lock()
_forked_away: list[Instance] = []  # a parent's idle instances, in a forked child: never used, never closed


class Instance:
    """One in-memory DuckDB database with `extensions` loaded; `con` is the lent lake's own connection."""

    def __init__(self, extensions: tuple[str, ...]) -> None:
        # Rows carry their own keys and every read that needs an order says ORDER BY, so
        # DuckDB need not buffer large inserts to keep their order (less memory).
        config = {"threads": _THREADS, "preserve_insertion_order": False}
        self.extensions = extensions
        self._pid = os.getpid()
        self._root = duckdb.connect(config=config)
        try:
            for name in extensions:
                self._root.execute(f"LOAD {sql_literal(str(extension_path(name)))}")
            self._made = self._global_state()
        except BaseException:
            self._root.close()
            raise
        self.con = self._root.cursor()

    def _lent_again(self) -> Instance:
        self._root.execute(f"SET GLOBAL threads = {_THREADS}")
        self.con = self._root.cursor()
        return self

    def give_back(self) -> None:
        """Close the lake's connection; keep the instance for the next lake when it is as it was made."""
        self.con.close()
        if os.getpid() != self._pid:  # forked: the parent's instance stays the parent's
            return
        try:
            reusable = self._clear()
        except duckdb.Error:
            reusable = False
        with _lock:
            if reusable and len(_idle) < IDLE_MAX:
                _idle.append(self)
                return
        self._root.close()

    def _clear(self) -> bool:
        """Detach the lake, drop its secrets, empty the file cache; whether nothing else changed."""
        root = self._root
        for (name,) in root.execute("SELECT database_name FROM duckdb_databases() WHERE NOT internal").fetchall():
            if name != "memory":
                root.execute(f'DETACH "{name}"')
        for name, persistent in root.execute("SELECT name, persistent FROM duckdb_secrets()").fetchall():
            if persistent:
                return False
            root.execute(f'DROP TEMPORARY SECRET "{name}"')
        # Switching the cache off empties it: a file rewritten under the same mtime reads anew.
        cached = root.execute("SELECT current_setting('enable_external_file_cache')").fetchone()[0]
        root.execute("SET GLOBAL enable_external_file_cache = false")
        root.execute(f"SET GLOBAL enable_external_file_cache = {str(cached).lower()}")
        if self._global_state() != self._made:
            return False
        # Idle worker threads would keep the memory their allocator caches hold (hundreds of MB
        # after a large query); ended, they hand it back as closing the instance did.
        root.execute("SET GLOBAL threads = 1")
        return True

    def _global_state(self) -> tuple[list[tuple[str, str]], list[tuple[str]]]:
        settings = self._root.execute("SELECT name, value FROM duckdb_settings() ORDER BY name").fetchall()
        loaded = self._root.execute("SELECT extension_name FROM duckdb_extensions() WHERE loaded ORDER BY 1")
        return settings, loaded.fetchall()


def lend(extensions: tuple[str, ...]) -> Instance:
    """An instance with exactly `extensions` loaded, for one lake alone until it calls `give_back`."""
    with _lock:
        kept = next((index for index, instance in enumerate(_idle) if instance.extensions == extensions), None)
        instance = _idle.pop(kept) if kept is not None else None
    return instance._lent_again() if instance is not None else Instance(extensions)


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # another thread may have held it at the fork
    _forked_away.extend(_idle)  # closing a DuckDB instance would join threads the child does not have
    _idle.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)
