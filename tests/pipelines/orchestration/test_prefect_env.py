"""Which Prefect server a run uses, and the bookkeeping of the state directory's temporary
server (records, leases, a stale or foreign pid) without starting one."""

import json
import os
import re
import subprocess
import sys

import pytest
from viewmill.pipelines.orchestration import local_server
from viewmill.pipelines.orchestration.prefect_env import (
    PrefectServerError,
    PrefectTarget,
    configured_server,
    connect_prefect,
)


def _profiles(home, active: str, url: str) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "profiles.toml").write_text(
        f'active = "{active}"\n\n[profiles.team]\nPREFECT_API_URL = "{url}"\n\n[profiles.solo]\n', encoding="utf-8"
    )


def test_the_active_profile_names_the_server_and_the_environment_wins(tmp_path, monkeypatch):
    home = tmp_path / "prefect-home"
    _profiles(home, "team", "http://team.example:4200/api")
    monkeypatch.setenv("PREFECT_HOME", str(home))
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.delenv("PREFECT_PROFILE", raising=False)
    assert configured_server() == PrefectTarget("http://team.example:4200/api", "profile 'team'")
    monkeypatch.setenv("PREFECT_PROFILE", "solo")
    assert configured_server() is None
    monkeypatch.setenv("PREFECT_API_URL", "http://env.example:4200/api")
    assert configured_server() == PrefectTarget("http://env.example:4200/api", "PREFECT_API_URL")


def test_a_profile_server_that_does_not_answer_is_named_with_its_profile(tmp_path, monkeypatch):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    home = tmp_path / "prefect-home"
    _profiles(home, "team", f"http://127.0.0.1:{closed}/api")
    monkeypatch.setenv("PREFECT_HOME", str(home))
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.delenv("PREFECT_PROFILE", raising=False)
    with pytest.raises(PrefectServerError, match=rf"127.0.0.1:{closed}/api \(from profile 'team'\) is unreachable"):
        connect_prefect(None)
    monkeypatch.setenv("PREFECT_PROFILE", "solo")
    with pytest.raises(PrefectServerError, match="prefect server start"):
        connect_prefect(None)  # deploy and serve never fall back to a temporary server


def _dead_pid() -> int:
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    return done.pid


def _record(home, pid: int, url: str = "http://127.0.0.1:9/api") -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "server.json").write_text(json.dumps({"url": url, "pid": pid}), encoding="utf-8")


def test_a_stale_record_is_forgotten_and_a_recycled_pid_is_never_killed(tmp_path):
    home = tmp_path / "prefect"
    _record(home, _dead_pid())
    local_server.retire(home, local_server.read_record(home))
    assert local_server.read_record(home) is None

    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _record(home, stranger.pid)  # the server died and its pid went to another process
        assert not local_server.is_ours(stranger.pid, home)
        local_server.retire(home, local_server.read_record(home))
        assert stranger.poll() is None, "a process that is not this home's server is left alone"
        assert local_server.read_record(home) is None
    finally:
        stranger.kill()
        stranger.wait()


def test_leases_of_dead_runs_are_dropped_and_stop_refuses_while_a_run_holds_one(tmp_path):
    home = tmp_path / "prefect"
    local_server.take_lease(home, _dead_pid())
    local_server.take_lease(home)
    assert local_server.live_leases(home) == [os.getpid()]
    assert sorted(p.name for p in (home / "leases").iterdir()) == [str(os.getpid())]

    dead = _dead_pid()
    _record(home, dead)
    with pytest.raises(local_server.LocalServerError, match=rf"pids {os.getpid()} use .* pass --force"):
        local_server.stop(home)
    assert local_server.read_record(home) == local_server.LocalServer("http://127.0.0.1:9/api", dead)
    assert local_server.stop(home, force=True) == local_server.LocalServer("http://127.0.0.1:9/api", dead)
    assert local_server.read_record(home) is None and local_server.stop(home) is None


def test_a_lease_whose_pid_was_recycled_does_not_keep_the_server_up(tmp_path):
    home = tmp_path / "prefect"
    lease = local_server.take_lease(home)
    lease.write_text("12.5", encoding="utf-8")  # another process that once had this pid
    assert local_server.live_leases(home) == [] and not lease.exists()


def test_server_commands_without_a_server_and_deploy_of_a_missing_file(tmp_path, monkeypatch):
    from typer.testing import CliRunner
    from viewmill.pipelines.cli.app import app

    runner = CliRunner()
    state = str(tmp_path / "state")
    status = runner.invoke(app, ["server", "status", "--state-dir", state])
    assert status.exit_code == 0
    assert f"no temporary Prefect server answers for {tmp_path}/state/prefect" in status.output
    stopped = runner.invoke(app, ["server", "stop", "--state-dir", state])
    assert stopped.exit_code == 0 and "no temporary Prefect server recorded" in stopped.output
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    missing = runner.invoke(app, ["deploy", "--prefect-file", str(tmp_path / "nope.yaml")])
    # Typer's error panel wraps at the terminal's width, and a long tmp_path (pytest-xdist's
    # popen-gwN folders) is cut across lines: read it without the panel and the spaces.
    flat = re.sub(r"[\s│╭╮╰╯─]+", "", missing.output)
    assert missing.exit_code == 2 and "cannotread" in flat and "nope.yaml" in flat
