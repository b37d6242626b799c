"""A real PostgreSQL server (Debian's package) on loopback, started for a test session."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
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


@contextmanager
def postgres_server(database: str = "viewmill", password: str | None = None) -> Iterator[str]:
    """Start a throw-away server; yields a libpq connection string for `database`.

    With `password`, TCP logins need it (scram-sha-256) and the string leaves it out.
    PostgreSQL refuses to run as root, so as root the server runs as the `postgres` user.
    """
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
        yield f"dbname={database} host=127.0.0.1 port={port} user=viewmill"
    finally:
        subprocess.run([*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                       capture_output=True, cwd=workdir)  # fmt: skip
        shutil.rmtree(workdir, ignore_errors=True)
