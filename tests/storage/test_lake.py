import itertools
import os
import time

import pyarrow as pa
import pytest
from viewmill.storage.lake import Lake, LakeError
from viewmill.storage.schema import EVALS


def _eval_rows(values):
    return pa.Table.from_pylist(
        [{"model": "m", "task": t, "metric": "spearman", "value": v, "n": 3} for t, v in values],
        schema=EVALS,
    )


def test_tables_are_created_with_their_declared_schema(tmp_path):
    with Lake(tmp_path / "lake") as lake:
        columns = lake.arrow("SELECT column_name, data_type FROM information_schema.columns WHERE table_name='views'")
        types = dict(zip(columns["column_name"].to_pylist(), columns["data_type"].to_pylist(), strict=True))
    assert types["quality"].startswith("STRUCT(length_ratio DOUBLE")
    assert types["provenance"].startswith("STRUCT(engines VARCHAR[]")


def test_append_with_unique_keys_skips_existing_and_repeated_rows(tmp_path):
    with Lake(tmp_path / "lake") as lake:
        assert lake.append("evals", _eval_rows([("a", 1.0), ("b", 2.0), ("b", 2.0)]), unique_on=("model", "task")) == 2
        assert lake.append("evals", _eval_rows([("a", 9.0), ("c", 3.0)]), unique_on=("model", "task")) == 1
        assert lake.arrow("SELECT task, value FROM evals ORDER BY task").to_pylist() == [
            {"task": "a", "value": 1.0},
            {"task": "b", "value": 2.0},
            {"task": "c", "value": 3.0},
        ]


def test_failed_transaction_leaves_nothing_behind(tmp_path):
    with Lake(tmp_path / "lake") as lake:
        version = lake.version()
        with pytest.raises(RuntimeError), lake.transaction():
            lake.append("evals", _eval_rows([("a", 1.0)]))
            raise RuntimeError("stage failed")
        assert lake.scalar("SELECT count(*) FROM evals") == 0
        assert lake.version() == version


def test_data_is_plain_parquet_readable_without_the_catalog(tmp_path):
    import duckdb

    with Lake(tmp_path / "lake") as lake:
        lake.append("evals", _eval_rows([("a", 1.0)]))
    files = list((tmp_path / "lake" / "data").rglob("*.parquet"))
    assert files, "committed rows must land in Parquet files"
    assert duckdb.sql(f"SELECT value FROM read_parquet('{files[0]}')").fetchall() == [(1.0,)]


def test_read_only_lake_sees_committed_rows_and_refuses_writes(tmp_path):
    with Lake(tmp_path / "lake") as lake:
        lake.append("evals", _eval_rows([("a", 1.0)]))
    with Lake(tmp_path / "lake", read_only=True) as reader:
        assert reader.scalar("SELECT count(*) FROM evals") == 1
        with pytest.raises(Exception, match="read-only|read only"):
            reader.con.execute("DELETE FROM evals")


def test_missing_lake_read_only_names_the_fix(tmp_path):
    with pytest.raises(LakeError, match="viewmill run"):
        Lake(tmp_path / "nowhere", read_only=True)


def _hold(tmp_path, body: str, catalog: str | None = None):
    """A second process that opens the lake, runs `body`, prints 'open' and waits to be killed."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(f"""
        import time
        import pyarrow as pa
        from viewmill.storage.lake import Lake
        from viewmill.storage.schema import EVALS
        lake = Lake({str(tmp_path / "lake")!r}, catalog={catalog!r})
        {body}
        print("open", flush=True)
        time.sleep(60)
    """)
    holder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "open"
    return holder


def test_readers_never_wait_for_a_writer_mid_transaction(tmp_path):
    with Lake(tmp_path / "lake") as lake:
        lake.append("evals", _eval_rows([("committed", 1.0)]))
    body = (
        "lake.con.execute('BEGIN TRANSACTION'); "
        "lake.append('evals', pa.Table.from_pylist([{'model': 'm', 'task': 'pending'}], schema=EVALS))"
    )
    holder = _hold(tmp_path, body)
    try:
        with Lake(tmp_path / "lake", read_only=True) as reader:
            assert reader.arrow("SELECT task FROM evals")["task"].to_pylist() == ["committed"]
    finally:
        holder.kill()
        holder.wait()


def test_a_duckdb_catalog_held_by_a_writer_gives_a_clear_error(tmp_path):
    Lake(tmp_path / "lake", catalog="duckdb").close()
    holder = _hold(tmp_path, "pass", catalog="duckdb")
    try:
        with pytest.raises(LakeError, match="locked by another process.*sqlite catalog"):
            Lake(tmp_path / "lake", read_only=True)
    finally:
        holder.kill()
        holder.wait()


def test_unknown_catalog_names_the_choices(tmp_path):
    with pytest.raises(LakeError, match="sqlite.*duckdb.*postgres:dbname"):
        Lake(tmp_path / "lake", catalog="oracle:x")


def test_a_rolled_back_transaction_leaves_no_file_and_older_strays_stay(tmp_path):
    """DuckLake keeps the Parquet files of a rolled-back transaction; the lake removes its own
    (streamed appends and all) and leaves a stray that was there before for `lake repair`."""
    with Lake(tmp_path / "lake") as lake:
        lake.append("evals", _eval_rows([("a", 0.1)]))
        data = tmp_path / "lake" / "data"
        before = set(data.rglob("*.parquet"))
        stray = next(iter(before)).with_name("ducklake-stray-from-a-crash.parquet")
        stray.write_bytes(next(iter(before)).read_bytes())
        os.utime(stray, (time.time() - 3600,) * 2)  # left by a run that crashed an hour ago

        def failing_stream():
            yield from _eval_rows([("b", 0.2), ("c", 0.3)]).to_batches()
            raise ValueError("the source broke")

        with pytest.raises(ValueError, match="the source broke"), lake.transaction():
            lake.append("evals", _eval_rows([("d", 0.4)]))
            lake.append("evals", pa.RecordBatchReader.from_batches(EVALS, failing_stream()))
        assert set(data.rglob("*.parquet")) == before | {stray}
        assert lake.scalar("SELECT count(*) FROM evals") == 1


def _view_rows(augmenter, sentence_ids):
    from viewmill.storage.ids import fingerprint
    from viewmill.storage.schema import VIEWS

    rows = [
        {"view_id": fingerprint(sid, augmenter), "sentence_id": sid, "augmenter": augmenter, "config_hash": augmenter,
         "method": "identity", "path": "", "text": sid, "lang": "en", "status": "kept", "run_id": "r"}
        for sid in sentence_ids
    ]  # fmt: skip
    return pa.Table.from_pylist(rows, schema=VIEWS)


def test_a_views_commit_reads_only_its_own_augmenter_and_sentence_range_to_skip_existing_views(tmp_path):
    # The duplicate check once read every view_id of the lake per commit (quadratic over a run).
    # Files it must not read are removed from disk: reading one fails the append.
    ids = [f"{i:04d}" for i in range(300)]
    with Lake(tmp_path / "lake") as lake:
        for augmenter, part in (("a", ids[:100]), ("a", ids[100:200]), ("b", ids[:300])):
            with lake.transaction():
                lake.append("views", _view_rows(augmenter, part), unique_on=("view_id",))
        data = tmp_path / "lake" / "data"
        files_a = list(data.rglob("augmenter=a/*.parquet"))
        keep = next(f for f in files_a if lake.scalar(f"SELECT bool_or(sentence_id = '0150') FROM '{f}'"))
        for path in [*data.rglob("augmenter=b/*.parquet"), *(f for f in files_a if f != keep)]:
            path.unlink()
        with lake.transaction():
            added = lake.append("views", _view_rows("a", ids[150:250]), unique_on=("view_id",))
    assert added == 50  # 150..199 were there already


def test_busy_seconds_count_reads_and_write_turns_once(tmp_path, monkeypatch):
    import viewmill.storage.lake as lake_module
    import viewmill.storage.lake_writes as writes_module

    class Clock:  # each perf_counter reading one second after the last; the rest is `time`'s
        def __init__(self):
            self.now = 0.0

        def perf_counter(self):
            self.now += 1.0
            return self.now

        def __getattr__(self, name):
            return getattr(time, name)

    with Lake(tmp_path / "lake") as lake:
        opened = lake.busy_seconds()  # opening a new lake creates its tables in a write turn
        assert opened > 0
        monkeypatch.setattr(lake_module, "time", Clock())
        monkeypatch.setattr(writes_module, "time", Clock())
        lake.scalar("SELECT 1")  # two readings: one second
        assert lake.busy_seconds() == opened + 1.0
        with lake.transaction():  # one turn: two readings of its own clock, whatever runs inside
            lake.scalar("SELECT count(*) FROM sentences")
            lake.append("evals", _eval_rows([("a", 1.0)]))
        assert lake.busy_seconds() == opened + 2.0


def test_sentences_are_written_sorted_by_id_in_small_row_groups(tmp_path):
    """A shard reads its id range through the row groups' min/max: the sentences table must be
    written in id order, in row groups much smaller than a million-sentence corpus."""
    from viewmill.storage.ids import text_hash
    from viewmill.storage.repair import rebuild_table
    from viewmill.storage.schema import SENTENCES

    rows = [{"corpus": "c", "sentence_id": text_hash(str(i)), "text": f"t {i}", "lang": "en"} for i in range(60000)]
    with Lake(tmp_path / "lake") as lake:
        lake.append("sentences", pa.Table.from_pylist(rows[:30000], schema=SENTENCES))  # ids in hash (random) order
        _assert_sorted_in_small_groups(lake, 30000)
        rebuild_table(lake, "sentences", set())  # what repair does to a damaged table: the layout stays
        lake.append("sentences", pa.Table.from_pylist(rows[30000:], schema=SENTENCES))
        _assert_sorted_in_small_groups(lake, 30000)


def _assert_sorted_in_small_groups(lake: Lake, rows: int) -> None:
    from viewmill.storage.schema import SORTED

    newest = "SELECT data_file FROM ducklake_list_files('lake', 'sentences') ORDER BY data_file DESC LIMIT 1"
    groups = lake.con.execute(
        "SELECT stats_min, stats_max, row_group_num_rows FROM parquet_metadata(?) "
        "WHERE path_in_schema = 'sentence_id' ORDER BY row_group_id",
        [lake.scalar(newest)],
    ).fetchall()
    assert len(groups) >= rows // SORTED["sentences"][1]
    assert all(rows_in <= SORTED["sentences"][1] for _, _, rows_in in groups)
    assert all(earlier[1] < later[0] for earlier, later in itertools.pairwise(groups)), "groups overlap"
