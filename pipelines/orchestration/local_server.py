"""A temporary Prefect server owned by one state directory and reused by consecutive runs.

The first run that needs it starts `python -m viewmill.pipelines.orchestration.local_server HOME` in its own
session (so a Ctrl-C or SIGKILL of that run leaves it up for the next one). The server writes
its own record (HOME/server.json: url, pid) once it answers, so a run killed while the server
starts never leaves an unrecorded one. Runs hold a lease (HOME/leases/<pid>); the server
stops itself after `idle_s` seconds with no live lease, and `viewmill server stop` stops it.

Where VIEWMILL_PREFECT_DB_TEMPLATE names a file (the tests do), a new home's database starts as
a copy of it, and the first server to make a database from nothing writes it: Prefect then
only checks the migrations instead of running them all on an empty database (~3.5 s a server).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import psutil
from filelock import FileLock

MODULE = "viewmill.pipelines.orchestration.local_server"
IDLE_ENV = "VIEWMILL_PREFECT_IDLE_S"
TEMPLATE_ENV = "VIEWMILL_PREFECT_DB_TEMPLATE"
DEFAULT_IDLE_S = 1800
START_TIMEOUT_S = 180


class LocalServerError(RuntimeError):
    """The temporary server could not be started or stopped; the message says what to do."""


@dataclass(frozen=True)
class LocalServer:
    url: str  # the API URL, http://127.0.0.1:PORT/api
    pid: int
    started: bool = False  # started by this call (False: reused)


def _record_path(home: Path) -> Path:
    return home / "server.json"


def _leases(home: Path) -> Path:
    return home / "leases"


def read_record(home: Path) -> LocalServer | None:
    try:
        data = json.loads(_record_path(home).read_text(encoding="utf-8"))
        return LocalServer(url=str(data["url"]), pid=int(data["pid"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def healthy(url: str, timeout: float = 5.0) -> bool:
    import httpx

    try:
        return httpx.get(url.rstrip("/") + "/health", timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False


def is_ours(pid: int, home: Path) -> bool:
    """Whether `pid` is this home's server process (a recycled pid is someone else's)."""
    try:
        cmdline = psutil.Process(pid).cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False
    return MODULE in cmdline and str(home) in cmdline


def _terminate(pid: int, grace_s: float = 30.0) -> None:
    try:
        process = psutil.Process(pid)
        process.terminate()
        process.wait(timeout=grace_s)
    except psutil.TimeoutExpired:
        process.kill()
        process.wait(timeout=grace_s)
    except psutil.NoSuchProcess:
        pass


def retire(home: Path, record: LocalServer) -> None:
    """Forget a recorded server that does not answer; end it when the pid is still ours
    (a hung server), never a process that merely reuses its pid."""
    if is_ours(record.pid, home):
        _terminate(record.pid, grace_s=10.0)
    _record_path(home).unlink(missing_ok=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawn(home: Path, idle_s: int) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API_")}
    env.update(PREFECT_HOME=str(home), DO_NOT_TRACK="1", PREFECT_SERVER_ANALYTICS_ENABLED="false")
    log = open(home / "server.log", "ab")  # noqa: SIM115 - the child keeps it
    with log:
        return subprocess.Popen(
            [sys.executable, "-m", MODULE, str(home), "--port", str(_free_port()), "--idle-s", str(idle_s)],
            env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,  # outlives the run by design; idle timeout or `server stop` end it
        )  # fmt: skip


def ensure(home: Path, *, idle_s: int | None = None, timeout: float = START_TIMEOUT_S) -> LocalServer:
    """This home's server: the recorded one when it answers, else a new one."""
    home.mkdir(parents=True, exist_ok=True)
    idle_s = idle_s if idle_s is not None else int(os.environ.get(IDLE_ENV, DEFAULT_IDLE_S))
    with FileLock(home / "server.lock", timeout=timeout + 60):
        record = read_record(home)
        if record is not None:
            if healthy(record.url, timeout=10.0):
                return record
            retire(home, record)
        process = _spawn(home, idle_s)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            record = read_record(home)
            if record is not None and record.pid == process.pid and healthy(record.url):
                return LocalServer(record.url, record.pid, started=True)
            if process.poll() is not None:
                raise LocalServerError(
                    f"the temporary Prefect server exited with code {process.returncode}: see {home / 'server.log'}"
                )
            time.sleep(0.25)
        _terminate(process.pid)
        raise LocalServerError(
            f"the temporary Prefect server did not answer within {timeout:.0f} s: see {home / 'server.log'}, "
            "or point PREFECT_API_URL at a running server"
        )


def _started_at(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


def take_lease(home: Path, pid: int | None = None) -> Path:
    """Mark a process (default: this one) as a user of the server: it stays up while the
    process lives. The lease holds the process's start time, so a recycled pid does not count."""
    pid = pid or os.getpid()
    lease = _leases(home) / str(pid)
    lease.parent.mkdir(parents=True, exist_ok=True)
    lease.write_text(str(_started_at(pid)), encoding="utf-8")
    return lease


def live_leases(home: Path) -> list[int]:
    """The pids of live processes holding a lease; leases of dead ones (a SIGKILLed run) are removed."""
    alive = []
    for lease in _leases(home).glob("*"):
        started = _started_at(int(lease.name)) if lease.name.isdigit() else None
        try:
            same = started is not None and lease.read_text(encoding="utf-8") == str(started)
        except OSError:
            same = False
        if same:
            alive.append(int(lease.name))
        else:
            lease.unlink(missing_ok=True)
    return sorted(alive)


def stop(home: Path, *, force: bool = False) -> LocalServer | None:
    """Stop this home's server; refuses while runs hold leases unless `force`."""
    with FileLock(home / "server.lock", timeout=START_TIMEOUT_S + 60):
        record = read_record(home)
        if record is None:
            return None
        users = live_leases(home)
        if users and not force:
            raise LocalServerError(
                f"runs with pids {', '.join(map(str, users))} use the Prefect server at {record.url}: "
                "wait for them, or pass --force to stop it anyway (they will fail)"
            )
        retire(home, record)
        return record


def _database(home: Path) -> Path:
    return home / "prefect.db"  # Prefect's SQLite database under PREFECT_HOME


def seed_database(home: Path) -> None:
    """A home without a database gets a copy of the template (when TEMPLATE_ENV names one that exists)."""
    template = os.environ.get(TEMPLATE_ENV)
    if template and Path(template).is_file() and not _database(home).exists():
        home.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(template, _database(home))


def save_template(home: Path) -> None:
    """The migrated database as the template, when TEMPLATE_ENV names one not made yet. Call it
    once the server answers and before any client knows it: no run is in the copy then."""
    template = os.environ.get(TEMPLATE_ENV)
    if not template or Path(template).exists() or not _database(home).is_file():
        return
    partial = Path(f"{template}.{os.getpid()}.tmp")
    try:
        with closing(sqlite3.connect(_database(home))) as src, closing(sqlite3.connect(partial)) as dst:
            src.backup(dst)  # one consistent copy, the WAL's pages included
            dst.execute("PRAGMA journal_mode=DELETE")  # one file, no -wal beside it
        partial.replace(template)  # whole or not at all: servers starting meanwhile see no half-written file
    except (OSError, sqlite3.Error):  # only a shortcut for later servers: this one goes on
        partial.unlink(missing_ok=True)


def _watch_idle(server, home: Path, idle_s: int, url: str) -> None:
    """Write the record once the server answers, then ask it to exit after `idle_s` without leases."""
    while not server.started:
        if server.should_exit:
            return
        time.sleep(0.1)
    save_template(home)
    tmp = _record_path(home).with_suffix(".tmp")
    tmp.write_text(json.dumps({"url": url, "pid": os.getpid()}), encoding="utf-8")
    tmp.replace(_record_path(home))
    last_used = time.monotonic()
    while not server.should_exit:
        if live_leases(home):
            last_used = time.monotonic()
        elif time.monotonic() - last_used >= idle_s:
            server.should_exit = True
        time.sleep(min(5.0, max(idle_s / 5, 0.5)))


def serve(home: Path, port: int, idle_s: int) -> None:
    """Run the server in this process (the server and its watchdog die together)."""
    import uvicorn
    from prefect.server.api.server import create_app

    url = f"http://127.0.0.1:{port}/api"
    seed_database(home)
    config = uvicorn.Config(
        create_app(ephemeral=True, final=True), host="127.0.0.1", port=port, log_level="error", lifespan="on"
    )
    server = uvicorn.Server(config)
    threading.Thread(target=_watch_idle, args=(server, home, idle_s, url), daemon=True).start()
    try:
        server.run()
    finally:
        record = read_record(home)
        if record is not None and record.pid == os.getpid():
            _record_path(home).unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}")
    parser.add_argument("home", type=Path)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--idle-s", type=int, default=DEFAULT_IDLE_S)
    args = parser.parse_args(argv)
    serve(args.home, args.port, args.idle_s)


if __name__ == "__main__":
    main()
