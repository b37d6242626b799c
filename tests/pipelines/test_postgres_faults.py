"""A PostgreSQL catalog that goes away mid-run, a wrong password and a role that may only
read: each ends in one message that names the catalog without its password, and nothing the
lake held is lost (issue 30). A real PostgreSQL server."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner
from viewmill.pipelines.cli.app import app
from viewmill.pipelines.recipe import load_recipe
from viewmill.pipelines.run import RunContext, run_recipe
from viewmill.pipelines.state import StatePaths
from viewmill.storage.catalog import Catalog
from viewmill.storage.lake import Lake

from tests.conftest import needs_apertium
from tests.lake_state import lake_state
from tests.postgres import needs_postgres, postgres_cluster

pytestmark = [needs_postgres, needs_apertium]
PASSWORD = "Pg-7Hq2-never-printed"
runner = CliRunner()


@pytest.fixture(scope="module")
def cluster():
    with postgres_cluster(database="lake", password=PASSWORD) as server:
        yield server


def _database(cluster, name: str) -> str:
    """A fresh database on the server; its conninfo without the password."""
    cluster.psql(f"CREATE DATABASE {name}", "lake")
    return cluster.dsn.replace("dbname=lake", f"dbname={name}")


def _nowhere(secret: str, *texts: str, folders=()) -> None:
    assert all(secret not in text for text in texts), "the password was printed or logged"
    needle = secret.encode()
    holding = [p for folder in folders for p in folder.rglob("*") if p.is_file() and needle in p.read_bytes()]
    assert holding == [], f"files hold the password: {holding}"


def _summary(recipe, state, catalog: str, monkeypatch) -> dict:
    monkeypatch.setenv("VIEWMILL_CATALOG", catalog)
    try:
        return run_recipe(RunContext(load_recipe(recipe), state), train=False)
    finally:
        monkeypatch.delenv("VIEWMILL_CATALOG")


def test_a_server_stopped_mid_run_fails_naming_the_catalog_and_a_rerun_completes_exactly(
    tmp_path, tiny_recipe, cluster, monkeypatch, caplog
):
    dsn = _database(cluster, "midrun")
    catalog = f"postgres:{dsn} password={PASSWORD}"
    reference = StatePaths(tmp_path / "reference")
    expected = _summary(tiny_recipe, reference, "sqlite", monkeypatch)
    state = StatePaths(tmp_path / "state")
    real_append, views_written = Lake.append, []

    def append_stopping_the_server_before_the_second_views_shard(self, table, rows, unique_on=()):
        if table == "views":
            views_written.append(1)
            if len(views_written) == 2:
                cluster.stop()
        return real_append(self, table, rows, unique_on)

    monkeypatch.setattr(Lake, "append", append_stopping_the_server_before_the_second_views_shard)
    args = ["run", str(tiny_recipe), "--no-prefect", "--state-dir", str(state.root), "--catalog", catalog,
            "--set", "execution.chunk_sentences=6"]  # fmt: skip
    try:
        result = runner.invoke(app, args)
    finally:
        monkeypatch.setattr(Lake, "append", real_append)
        cluster.start()
    out = " ".join(result.output.split())
    assert result.exit_code == 1 and "Traceback" not in out, out
    uri = Catalog.parse(catalog, state.lake).uri
    assert f"error: failed: lost the connection to the lake's PostgreSQL catalog {uri} (" in out
    assert (
        "): what was not committed was rolled back and the lake keeps its last commit; check that the server is up "
        "(pg_isready) and run again: the rerun makes only what is missing"
    ) in out
    _nowhere(PASSWORD, result.output, caplog.text, folders=[state.root])
    partway = lake_state(state.lake, catalog)["counts"]
    assert 0 < partway["views"] < expected["augment"]["bt_es"]["new_views"] + expected["augment"]["bt_ca"]["new_views"]

    again = _summary(tiny_recipe, state, catalog, monkeypatch)
    assert again["snapshot"]["name"] == expected["snapshot"]["name"]
    assert again["snapshot"]["content_hash"] == expected["snapshot"]["content_hash"]
    mine, theirs = lake_state(state.lake, catalog), lake_state(reference.lake)
    assert mine["counts"].pop("runs") == theirs["counts"].pop("runs") + 1, "the failed run's row is kept"
    assert mine["counts"] == theirs["counts"] and mine["snapshots"] == theirs["snapshots"], "no duplicates"
    _nowhere(PASSWORD, caplog.text, folders=[state.root])


def test_a_wrong_password_is_refused_and_held_nowhere(tmp_path, tiny_recipe, cluster, caplog):
    dsn, wrong = _database(cluster, "wrongpw"), "Wr0ng-9xQ-not-this-one"
    state = tmp_path / "state"
    for command in (["run", str(tiny_recipe), "--no-prefect"], ["lake", "verify"], ["sql", "SELECT 1"]):
        result = runner.invoke(
            app, [*command, "--state-dir", str(state), "--catalog", f"postgres:{dsn} password={wrong}"]
        )
        out = " ".join(result.output.split())
        assert result.exit_code == 2 and "Traceback" not in out, (command, out)
        assert out.startswith(f"error: cannot open the lake catalog {Catalog.parse(f'postgres:{dsn}', state).uri}: ")
        assert 'password authentication failed for user "viewmill"' in out
        _nowhere(wrong, result.output, caplog.text, folders=[tmp_path])
        _nowhere(PASSWORD, result.output, caplog.text, folders=[tmp_path])


def test_a_role_that_may_only_select_can_query_and_cannot_write(tmp_path, tiny_recipe, cluster, monkeypatch):
    dsn = _database(cluster, "readonly")
    owner = f"postgres:{dsn} password={PASSWORD}"
    state = StatePaths(tmp_path / "state")
    _summary(tiny_recipe, state, owner, monkeypatch)
    before = lake_state(state.lake, owner)
    reader_password = "Rd-4kW-reader-secret"
    cluster.psql(
        f"CREATE ROLE reader LOGIN PASSWORD '{reader_password}'; GRANT CONNECT ON DATABASE readonly TO reader; "
        "GRANT USAGE ON SCHEMA public TO reader; GRANT SELECT ON ALL TABLES IN SCHEMA public TO reader",
        "readonly",
    )
    reader = f"postgres:{dsn.replace('user=viewmill', 'user=reader')} password={reader_password}"
    base = ["--state-dir", str(state.root), "--catalog", reader]
    query = runner.invoke(app, ["sql", "SELECT count(*) AS n FROM views", "--format", "json", *base])
    assert query.exit_code == 0, query.output
    assert query.output.strip() == f'{{"n":{before["counts"]["views"]}}}'

    outputs = []
    for command in (["run", str(tiny_recipe), "--no-prefect", "--set", "corpus.min_words=4"],
                    ["sql", "DELETE FROM views"], ["sql", "CREATE TABLE planted AS SELECT 1 AS x"]):  # fmt: skip
        result = runner.invoke(app, [*command, *base])
        out = " ".join(result.output.split())
        assert result.exit_code in (1, 2) and "Traceback" not in out and "error: " in out, (command, out)
        outputs.append(out)
    assert outputs[0].endswith(
        f"error: failed: the lake's PostgreSQL catalog {Catalog.parse(reader, state.lake).uri} refused a write "
        "(permission denied for table ducklake_snapshot): the role reader may only read, so nothing was written; run "
        "writing commands with a role that owns the catalog's tables (a role with SELECT only can run `viewmill sql`) "
        "(VIEWMILL_DEBUG=1 shows the traceback)"
    )
    assert all(out.startswith("error: viewmill sql is read-only: ") for out in outputs[1:])
    _nowhere(reader_password, *outputs, folders=[state.root])
    assert lake_state(state.lake, owner) == before, "nothing written"
    verify = runner.invoke(app, ["lake", "verify", "--state-dir", str(state.root), "--catalog", owner])
    assert verify.exit_code == 0 and "lake ok" in verify.output, "no stray file left: " + verify.output
