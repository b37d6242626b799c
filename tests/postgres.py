"""A real PostgreSQL server (Debian's package) on loopback, started for a test session."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest


def postgres_bin() -> Path | None:
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(Path(p).parts[4]))
    return Path(candidates[-1]).parent if candidates else None


needs_postgres = pytest.mark.skipif(
    postgres_bin() is None, reason="PostgreSQL is not installed: apt-get install postgresql"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Cluster:
    """A throw-away server: its connection string (no password), and ways to stop, start and query it."""

    dsn: str
    run: Callable[..., None]
    bindir: Path
    data: Path
    options: str
    workdir: Path

    def stop(self) -> None:
        self.run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop")

    def start(self) -> None:
        self.run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-o", self.options, "-l",
                 str(self.workdir / "log"), "-w", "start")  # fmt: skip

    def psql(self, sql: str, database: str) -> None:
        """Run `sql` as the superuser over the local socket (no password)."""
        port = self.options.split(" -p ")[1].split()[0]
        self.run(str(self.bindir / "psql"), "-h", str(self.workdir), "-p", port, "-U", "viewmill", "-d", database,
                 "-v", "ON_ERROR_STOP=1", "-c", sql)  # fmt: skip


@contextmanager
def postgres_server(database: str = "viewmill", password: str | None = None) -> Iterator[str]:
    """Start a throw-away server; yields a libpq connection string for `database`.

    With `password`, TCP logins need it (scram-sha-256) and the string leaves it out.
    PostgreSQL refuses to run as root, so as root the server runs as the `postgres` user.
    """
    with postgres_cluster(database, password) as cluster:
        yield cluster.dsn


@contextmanager
def postgres_cluster(database: str = "viewmill", password: str | None = None) -> Iterator[Cluster]:
    """`postgres_server`, yielding the server itself (to stop and start it, or add roles)."""
    bindir = postgres_bin()
    assert bindir is not None
    as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    workdir = Path(tempfile.mkdtemp(prefix="viewmill-pg-"))
    if as_user:
        shutil.chown(workdir, "postgres")
    data, port = workdir / "data", _free_port()

    def run(*cmd: str) -> None:
        subprocess.run([*as_user, *cmd], check=True, capture_output=True, cwd=workdir)

    auth = ["--auth=trust"]
    if password is not None:
        (workdir / "pw").write_text(password + "\n")
        if as_user:
            shutil.chown(workdir / "pw", "postgres")
        auth = ["--auth-host=scram-sha-256", "--auth-local=trust", f"--pwfile={workdir / 'pw'}"]
    run(str(bindir / "initdb"), "-D", str(data), "-U", "viewmill", *auth, "-E", "UTF8")
    options = f"-c listen_addresses=127.0.0.1 -p {port} -k {workdir} -c fsync=off -c max_connections=50"
    run(str(bindir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(workdir / "log"), "-w", "start")
    try:
        run(str(bindir / "createdb"), "-h", str(workdir), "-p", str(port), "-U", "viewmill", database)
        yield Cluster(
            f"dbname={database} host=127.0.0.1 port={port} user=viewmill", run, bindir, data, options, workdir
        )
    finally:
        subprocess.run([*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                       capture_output=True, cwd=workdir)  # fmt: skip
        shutil.rmtree(workdir, ignore_errors=True)
