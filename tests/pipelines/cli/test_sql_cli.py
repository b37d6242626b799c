"""`viewmill sql` as a command: the query from an argument, -f FILE or stdin; a time and a memory
limit with a clear message when hit; and output files (`sql --output`, `lake export`) that never
land on the lake's catalog or data files, however the path is given."""

from __future__ import annotations

import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner
from viewmill.pipelines.cli.app import app
from viewmill.storage.corpus_versions import record_corpus_version
from viewmill.storage.lake import Lake
from viewmill.storage.schema import VIEWS
from viewmill.storage.snapshots import create_pairs_snapshot

from tests.lake_state import lake_state, small_lake
from tests.pipelines.cli.test_sql_sandbox import lake_files

runner = CliRunner()
SEVEN_WAY = "SELECT count(*) FROM " + ", ".join(f"range(100) t{i}" for i in range(7))


@pytest.fixture(scope="module")
def state(tmp_path_factory):
    """A lake with one pairs snapshot (3 pairs), for queries and exports."""
    root = tmp_path_factory.mktemp("cli")
    small_lake(root / "lake")
    with Lake(root / "lake") as lake:
        views = [{"view_id": f"{side}{i}", "sentence_id": f"s{i}", "augmenter": side, "config_hash": f"h{side}",
                  "text": f"view {side} {i}", "lang": "en", "status": "kept"}
                 for i in range(3) for side in "ab"]  # fmt: skip
        lake.append("views", pa.Table.from_pylist(views, schema=VIEWS))
        version = record_corpus_version(lake, "c", ["s0", "s1", "s2"], run_id="seed")
        snapshot = create_pairs_snapshot(lake, recipe="r", corpus="c", corpus_version=version,
                                         pairings=[("ha", "hb")], run_id="seed")  # fmt: skip
    assert snapshot.n_pairs == 3
    return root, snapshot.name


def _one_line(result) -> str:
    return " ".join(result.output.split())


def _sql(root, *args: str, **kwargs):
    return runner.invoke(app, ["sql", *args, "--state-dir", str(root), "--format", "csv"], **kwargs)


def test_the_query_comes_from_an_argument_a_file_or_stdin(state, tmp_path):
    root, _ = state
    query = tmp_path / "q.sql"
    query.write_text("-- how many sentences\nSELECT count(*) AS n\nFROM sentences\n")
    for args, stdin in ((["SELECT count(*) AS n FROM sentences"], None), (["-f", str(query)], None),
                        (["-"], query.read_text()), (["-f", "-"], query.read_text())):  # fmt: skip
        result = _sql(root, *args, input=stdin)
        assert (result.exit_code, result.stdout) == (0, "n\n3\n"), (args, result.output)


def test_a_query_given_twice_or_not_at_all_is_a_usage_error(state, tmp_path):
    root, _ = state
    (tmp_path / "q.sql").write_text("SELECT 1")
    for args in (["SELECT 1", "-f", str(tmp_path / "q.sql")], []):
        result = _sql(root, *args)
        assert result.exit_code == 2 and "Usage: " in result.stderr and result.stdout == ""
        boxed = " ".join(result.output.replace("│", " ").split())  # click's usage error, drawn in a box
        assert "give the query once: as an argument, with -f FILE, or - to read it from stdin" in boxed


def test_an_unreadable_query_file_is_one_clear_error(state, tmp_path):
    root, _ = state
    missing = tmp_path / "missing.sql"
    assert _one_line(_sql(root, "-f", str(missing))) == (
        f"error: cannot read the query file {missing}: No such file or directory"
    )
    binary = tmp_path / "binary.sql"
    binary.write_bytes(b"SELECT '\xff'")
    assert _one_line(_sql(root, "-f", str(binary))).startswith(f"error: the query in {binary} is not UTF-8 text")
    huge = tmp_path / "huge.sql"
    huge.write_text("SELECT 1 " + " " * (1 << 20))
    result = _sql(root, "-f", str(huge))
    assert result.exit_code == 2
    assert (
        _one_line(result) == f"error: the query in {huge} is over 1 MiB: give viewmill sql one query, not a data file"
    )


def test_several_statements_in_a_file_are_refused(state, tmp_path):
    root, _ = state
    (tmp_path / "two.sql").write_text("SELECT 1;\nSELECT 2;\n")
    result = _sql(root, "-f", str(tmp_path / "two.sql"))
    assert result.exit_code == 2 and result.stdout == ""
    assert _one_line(result) == (
        "error: viewmill sql runs one statement at a time, and the query holds 2 ('SELECT 1'; 'SELECT 2'): "
        "run them one by one"
    )


def test_a_query_past_its_time_limit_is_stopped(state):
    """Issue 21: a 7-way cross join ran until killed."""
    root, _ = state
    started = time.monotonic()
    result = _sql(root, SEVEN_WAY, "--timeout", "1")
    assert result.exit_code == 2 and result.stdout == ""
    assert _one_line(result) == (
        "error: the query ran past its 1 s limit: narrow it (a WHERE, a LIMIT, fewer joins), or raise --timeout"
    )
    assert time.monotonic() - started < 30
    assert _sql(root, "SELECT count(*) AS n FROM sentences").stdout == "n\n3\n", "the lake still reads"


def test_a_query_past_its_memory_limit_is_stopped_without_spilling(state):
    root, _ = state
    before = lake_files(root)
    result = _sql(root, "SELECT * FROM range(30000000) t(x) ORDER BY random()", "--memory", "64MB")
    assert result.exit_code == 2 and result.stdout == ""
    assert _one_line(result) == (
        "error: the query needed more than its 64MB memory limit (nothing spills to disk): narrow it "
        "(a WHERE, a LIMIT, fewer columns), or raise --memory"
    )
    assert lake_files(root) == before


def test_limits_have_defaults_and_bad_values_are_named(state):
    root, _ = state
    help_text = " ".join(runner.invoke(app, ["sql", "--help"], env={"COLUMNS": "200"}).output.split())
    assert "--timeout SECONDS stop the command (query and output) after this long [default: 60.0]" in help_text
    assert "--memory SIZE the query's memory limit (nothing spills to disk) [default: 2GB]" in help_text
    assert _one_line(_sql(root, "SELECT 1", "--timeout", "0")) == (
        "error: --timeout 0.0 is not a time limit: give seconds above 0, e.g. --timeout 60"
    )
    assert _one_line(_sql(root, "SELECT 1", "--memory", "lots")) == (
        "error: --memory 'lots' is not a size: write it like 2GB, 512MB or 1.5GiB"
    )


def _inside_lake(path, folder) -> str:
    return (
        f"error: refusing to write {path}: it is inside the lake ({folder}), where it could overwrite the catalog "
        "or a data file; write it outside the state directory's lake"
    )


def test_sql_output_never_lands_in_the_lake(state, tmp_path):
    root, _ = state
    lake = root / "lake"
    link = tmp_path / "innocent.csv"
    link.symlink_to(lake / "catalog.sqlite")
    data_file = next((lake / "data").rglob("*.parquet"))
    before, files = lake_state(lake), lake_files(root)
    for out, fmt in ((lake / "catalog.sqlite", "csv"), (data_file, "parquet"), (link, "csv"), (lake, "json")):
        result = runner.invoke(app, ["sql", "SELECT 1 AS a", "--state-dir", str(root), "--format", fmt, "-o", str(out)])
        assert result.exit_code == 2, (out, result.output)
        assert _one_line(result) == _inside_lake(out, lake.resolve()), out
    assert lake_state(lake) == before and lake_files(root) == files and link.is_symlink()
    fine = tmp_path / "result.parquet"
    written = runner.invoke(
        app, ["sql", "FROM sentences", "--state-dir", str(root), "--format", "parquet", "-o", str(fine)]
    )
    assert written.exit_code == 0 and pq.read_table(fine).num_rows == 3


def test_sql_output_never_lands_on_a_catalog_kept_elsewhere(tmp_path):
    """A catalog outside the lake folder (--catalog sqlite:PATH): the file itself, its journal, a link to it."""
    catalog = tmp_path / "catalogs" / "viewmill.sqlite"
    catalog.parent.mkdir()
    spec = f"sqlite:{catalog}"
    small_lake(tmp_path / "state" / "lake", catalog=spec)
    link = tmp_path / "link.csv"
    link.symlink_to(catalog)
    before = catalog.read_bytes()
    for out in (catalog, link, catalog.with_name("viewmill.sqlite-wal")):
        args = ["sql", "SELECT 1 AS a", "--state-dir", str(tmp_path / "state"), "--catalog", spec, "--format", "csv",
                "-o", str(out)]  # fmt: skip
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (out, result.output)
        assert _one_line(result) == (
            f"error: refusing to write {out}: it is the lake's catalog {catalog} (or its journal); "
            "write it somewhere else"
        )
    assert catalog.read_bytes() == before


def test_lake_export_never_lands_in_the_lake(state, tmp_path):
    root, snapshot = state
    lake = root / "lake"
    link = tmp_path / "pairs.parquet"
    link.symlink_to(lake / "catalog.sqlite")
    before, files = lake_state(lake), lake_files(root)
    for out in (lake / "catalog.sqlite", lake / "data" / "main" / "pairs" / "forged.parquet", link):
        result = runner.invoke(app, ["lake", "export", snapshot, str(out), "--format", "parquet", "--state-dir",
                                     str(root)])  # fmt: skip
        assert result.exit_code == 2, (out, result.output)
        assert _one_line(result) == _inside_lake(out, lake.resolve())
    assert lake_state(lake) == before and lake_files(root) == files
    fine = tmp_path / "out" / "pairs.jsonl"
    exported = runner.invoke(app, ["lake", "export", snapshot, str(fine), "--state-dir", str(root)])
    assert exported.exit_code == 0 and len(fine.read_text().splitlines()) == 3
