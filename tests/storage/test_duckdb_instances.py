"""Lakes opened in one process share DuckDB instances one at a time (extensions loaded once) and
never see one another: their own catalog, secrets, settings and connection state."""

import os
import threading

import duckdb
import pyarrow as pa
import pytest
from viewmill.storage import duckdb_instances
from viewmill.storage.lake import Lake
from viewmill.storage.schema import EVALS
from viewmill.storage.sql.sandbox import open_query_lake

from viewmill.memory import rss_now


@pytest.fixture
def connects(monkeypatch) -> list[int]:
    """No idle instance to begin with; one entry per DuckDB instance made."""
    monkeypatch.setattr(duckdb_instances, "_idle", [])
    made: list[int] = []
    connect = duckdb.connect

    def counted(*args, **kwargs):
        made.append(1)
        return connect(*args, **kwargs)

    monkeypatch.setattr(duckdb, "connect", counted)
    return made


def _evals(task: str) -> pa.Table:
    row = {"model": "m", "task": task, "metric": "spearman", "value": 1.0, "n": 3}
    return pa.Table.from_pylist([row], schema=EVALS)


def test_lakes_opened_one_after_another_load_the_extensions_into_one_instance(tmp_path, connects):
    for index in range(5):
        with Lake(tmp_path / "lake", read_only=index % 2 == 1) as lake:
            assert lake.scalar("SELECT count(*) FROM runs") == 0
    assert len(connects) == 1


def test_two_lakes_open_at_once_stay_apart(tmp_path, connects):
    with Lake(tmp_path / "a") as a, Lake(tmp_path / "b") as b:
        a.append("evals", _evals("only-a"))
        b.append("evals", _evals("only-b"))
        assert a.arrow("SELECT task FROM evals")["task"].to_pylist() == ["only-a"]
        assert b.arrow("SELECT task FROM evals")["task"].to_pylist() == ["only-b"]
    assert len(connects) == 2


def test_a_lake_opened_after_another_closed_sees_nothing_of_it(tmp_path, connects):
    with Lake(tmp_path / "a") as first:
        first.append("evals", _evals("a"))
        first.con.execute("CREATE TEMPORARY TABLE scratch AS SELECT 1 AS x")
        first.con.register("keys", pa.table({"k": [1]}))
        first.con.execute("CREATE TEMPORARY SECRET leftover (TYPE http, BEARER_TOKEN 'not-for-b')")
        first.con.execute("SET TimeZone = 'Asia/Tokyo'")
        assert first.scalar("SELECT count(*) FROM (SELECT * FROM evals)") == 1
        first.con.execute("BEGIN TRANSACTION")  # left open by a failed step
    with Lake(tmp_path / "b") as second:
        assert len(connects) == 1, "the closed lake's instance is lent again"
        databases = {row[0] for row in second.con.execute("SELECT database_name FROM duckdb_databases()").fetchall()}
        assert databases == {"lake", "memory", "system", "temp"}
        assert second.scalar("SELECT count(*) FROM evals") == 0
        assert second.scalar("SELECT count(*) FROM duckdb_tables() WHERE table_name IN ('scratch', 'keys')") == 0
        with pytest.raises(duckdb.CatalogException):
            second.scalar("SELECT * FROM keys")
        assert second.scalar("SELECT count(*) FROM duckdb_secrets()") == 0
        assert second.scalar("SELECT current_setting('TimeZone')") != "Asia/Tokyo"
        assert second.scalar("SELECT count(*) FROM duckdb_external_file_cache()") == 0
        second.append("evals", _evals("b"))  # no transaction of the first lake's in the way


def test_an_instance_whose_settings_changed_is_closed_not_lent_again(tmp_path, connects):
    with Lake(tmp_path / "lake") as lake:
        lake.con.execute("SET memory_limit = '123MiB'")  # a global setting
    with Lake(tmp_path / "lake") as lake:
        assert len(connects) == 2
        assert lake.scalar("SELECT current_setting('memory_limit')") != "123.0 MiB"


def test_a_lake_opened_after_viewmill_sql_can_still_write(tmp_path, connects):
    with Lake(tmp_path / "lake") as lake:
        lake.append("evals", _evals("a"))
    with open_query_lake(tmp_path / "lake") as locked:  # settings locked, no external access
        assert locked.scalar("SELECT count(*) FROM evals") == 1
    with Lake(tmp_path / "lake") as lake:
        lake.append("evals", _evals("b"))
        assert lake.scalar("SELECT current_setting('lock_configuration')") is False
        assert lake.scalar("SELECT count(*) FROM evals") == 2


def test_lakes_opened_in_threads_each_get_their_own_instance(tmp_path, connects):
    failures: list[BaseException] = []
    start = threading.Barrier(4)

    def work(index: int) -> None:
        try:
            start.wait()
            for round_ in range(3):
                with Lake(tmp_path / f"lake{index}") as lake:
                    lake.append("evals", _evals(f"{index}-{round_}"))
                    assert lake.scalar("SELECT count(*) FROM evals") == round_ + 1
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(index,)) for index in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures
    assert len(duckdb_instances._idle) <= duckdb_instances.IDLE_MAX


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX only")
def test_a_forked_child_leaves_the_parents_idle_instances_alone(tmp_path, connects):
    with Lake(tmp_path / "lake") as lake:
        lake.append("evals", _evals("parent"))
    assert len(duckdb_instances._idle) == 1
    pid = os.fork()
    if pid == 0:  # the child: a new instance of its own, the parent's idle one untouched
        code = 1
        try:
            with Lake(tmp_path / "lake") as lake:
                lake.append("evals", _evals("child"))
            code = 0 if len(connects) == 2 and len(duckdb_instances._forked_away) == 1 else 2
        finally:
            os._exit(code)
    assert os.waitpid(pid, 0)[1] == 0
    with Lake(tmp_path / "lake") as lake:
        assert sorted(lake.arrow("SELECT task FROM evals")["task"].to_pylist()) == ["child", "parent"]
    assert len(connects) == 1


def test_an_idle_instance_hands_back_the_memory_its_lakes_query_took(tmp_path, connects):
    before = rss_now()
    with Lake(tmp_path / "lake") as lake:
        lake.con.execute("CREATE TEMPORARY TABLE big AS SELECT md5(range::VARCHAR) AS s FROM range(1500000)")
        lake.con.execute("SELECT s, count(*) FROM big GROUP BY s ORDER BY s LIMIT 1").fetchall()
        peak = rss_now()
    assert len(duckdb_instances._idle) == 1
    assert rss_now() - before < (peak - before) / 3, "as little kept as a closed instance keeps"
