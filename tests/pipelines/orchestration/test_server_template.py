"""A temporary Prefect server's database starts as a copy of the migrated template the first
server wrote (local_server.TEMPLATE_ENV), and the copy serves like a database made anew."""

import sqlite3
from contextlib import closing

import httpx
from viewmill.pipelines.orchestration import local_server


def test_a_new_servers_database_is_a_copy_of_the_template_the_first_server_wrote(tmp_path, monkeypatch):
    template = tmp_path / "template.db"
    monkeypatch.setenv(local_server.TEMPLATE_ENV, str(template))
    first = local_server.ensure(tmp_path / "first", idle_s=60)
    try:
        assert template.is_file(), "the first server writes the template once it has migrated"
        httpx.post(f"{first.url}/flows/", json={"name": "first-only"}).raise_for_status()
    finally:
        local_server.stop(tmp_path / "first", force=True)
    with closing(sqlite3.connect(template)) as con:
        assert con.execute("SELECT count(*) FROM flow").fetchone()[0] == 0, "written before any client came"
        con.execute("CREATE TABLE viewmill_marker (x INTEGER)")  # tells a copy from a database made anew
        con.commit()

    second = local_server.ensure(tmp_path / "second", idle_s=60)
    try:
        httpx.post(f"{second.url}/flows/", json={"name": "second"}).raise_for_status()
        flows = httpx.post(f"{second.url}/flows/filter", json={}).json()
        assert [flow["name"] for flow in flows] == ["second"]
    finally:
        local_server.stop(tmp_path / "second", force=True)
    with closing(sqlite3.connect(tmp_path / "second" / "prefect.db")) as con:
        assert con.execute("SELECT count(*) FROM sqlite_master WHERE name = 'viewmill_marker'").fetchone()[0] == 1
