"""`viewmill sql` output: limits that bound the whole command, not only DuckDB (issue 30.3); every
DuckDB type in every format, converted or refused by name (30.4); the format from the file's
suffix, files made like `lake export`'s, and a table drawn as DuckDB's shell draws it (33.6)."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from rich.console import Console
from typer.testing import CliRunner
from viewmill.pipelines.cli import output
from viewmill.pipelines.cli.app import app
from viewmill.pipelines.cli.output import OutputFormat, write_result
from viewmill.storage.sql.sandbox import QueryLimits, open_query_lake, stream_query

from tests.lake_state import small_lake

runner = CliRunner()
CRASH_TEXT = ("Traceback", "panicked", "PanicException", "ComputeError", "RUST_BACKTRACE")
LIMITS = QueryLimits()
TIME_HIT = "error: the query ran past its 1 s limit: narrow it (a WHERE, a LIMIT, fewer joins), or raise --timeout"


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("sql-output")
    small_lake(root / "lake")
    return root


def _sql(root: Path, *args: str):
    return runner.invoke(app, ["sql", *args, "--state-dir", str(root)])


def _one_line(text: str) -> str:
    return " ".join(text.split())


# --- 30.4: every DuckDB type in every format -----------------------------------------------

with duckdb.connect() as _con:
    ALL_TYPES = [(row[0], row[1]) for row in _con.execute("DESCRIBE SELECT * FROM test_all_types()").fetchall()]
# Parquet holds integers up to DECIMAL(38,0); test_all_types() holds HUGEINT's and UHUGEINT's extremes.
REFUSED = {("hugeint", "parquet"): "HUGEINT", ("uhugeint", "parquet"): "UHUGEINT"}


@pytest.fixture(scope="module")
def query_lake(root):
    with open_query_lake(root / "lake") as lake:
        yield lake


def _read_back(fmt: str, path: Path, shown: str, column: str) -> int:
    """The number of rows the written result holds, read as its format's readers read it."""
    if fmt == "table":
        assert column in shown
        return sum(1 for line in shown.splitlines() if line.startswith("│"))
    if fmt == "csv":
        rows = list(csv.reader(io.StringIO(path.read_text(encoding="utf-8"))))
        assert rows[0] == [column] and all(len(row) == 1 for row in rows[1:3]) and rows[3] == []  # NULL: empty
        return len(rows) - 1
    if fmt in ("json", "jsonl"):
        objects = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        assert all(list(o) == [column] for o in objects)
        return len(objects)
    assert pq.read_table(path).column_names == [column]
    return duckdb.connect().execute("SELECT count(*) FROM read_parquet(?)", [str(path)]).fetchone()[0]


@pytest.mark.parametrize("fmt", [f.value for f in OutputFormat])
@pytest.mark.parametrize(("column", "duck_type"), ALL_TYPES, ids=[name for name, _ in ALL_TYPES])
def test_every_duckdb_type_converts_or_is_refused_by_name_in_every_format(
    query_lake, tmp_path, capsys, column, duck_type, fmt
):
    """Each column of DuckDB's test_all_types() (its extremes and a NULL) through the real
    locked connection and the writer each format uses."""
    path = tmp_path / f"out.{fmt}"
    shown = io.StringIO()
    query = f'SELECT "{column}" FROM test_all_types()'
    try:
        with stream_query(query_lake, query, LIMITS) as stream:
            target = None if fmt == "table" else path
            rows = write_result(stream, stream.schema, OutputFormat(fmt), target, memory=LIMITS.memory,
                                console=Console(file=shown, width=400))  # fmt: skip
    except ValueError as exc:
        kind = REFUSED.get((column, fmt))
        assert kind is not None, f"{column} ({duck_type}) as {fmt}: {exc}"
        assert str(exc) == (
            f"column '{column}' ({kind}) holds a value Parquet cannot hold (Parquet holds DECIMAL(38,0) at most): "
            f'cast it in the query, e.g. CAST("{column}" AS VARCHAR)'
        )
        assert not path.exists() and list(tmp_path.iterdir()) == []  # no partial file either
        return
    assert (column, fmt) not in REFUSED, "refused cases must stay refused (or leave REFUSED)"
    assert rows == 3 and _read_back(fmt, path, shown.getvalue(), column) == 3
    assert [p.name for p in tmp_path.iterdir()] == ([] if fmt == "table" else [path.name])
    err = capsys.readouterr().err  # the row count, and whether long values were cut
    assert err.startswith("3 row(s)") if fmt == "table" else err == ""


def test_the_types_that_crashed_are_written_by_the_cli_without_a_traceback(root, tmp_path):
    """Issue 30.4 as reported: BLOB as JSON (a Rust panic), INTERVAL as CSV/JSON, UNION as JSON,
    BLOB as CSV (raw ComputeErrors, exit 1), and a metadata table function."""
    query = 'SELECT "blob", "interval", "union", "bit", "time_tz", "hugeint" FROM test_all_types()'
    as_json = _sql(root, query, "--format", "json")
    assert as_json.exit_code == 0, as_json.output
    first = json.loads(as_json.stdout.splitlines()[0])
    assert first == {"blob": "dGhpc2lzYWxvbmdibG9iAHdpdGhudWxsYnl0ZXM=", "interval": "00:00:00",
                     "union": {"name": "Frank"}, "bit": "0010001001011100010101011010111",
                     "time_tz": "00:00:00+15:59:59", "hugeint": -170141183460469231731687303715884105728}  # fmt: skip
    as_csv = _sql(root, query, "--format", "csv")
    assert as_csv.exit_code == 0, as_csv.output
    assert as_csv.stdout.splitlines()[:2] == [
        "blob,interval,union,bit,time_tz,hugeint",
        "dGhpc2lzYWxvbmdibG9iAHdpdGhudWxsYnl0ZXM=,00:00:00,Frank,0010001001011100010101011010111,00:00:00+15:59:59,"
        "-170141183460469231731687303715884105728",
    ]
    functions = _sql(root, "SELECT * FROM duckdb_types()", "-o", str(tmp_path / "types.json"))
    assert functions.exit_code == 0, functions.output
    for result in (as_json, as_csv, functions):
        assert not any(text in result.output for text in CRASH_TEXT), result.output


def test_a_refused_type_exits_2_naming_the_column_and_a_cast_that_works(root, tmp_path):
    out = tmp_path / "wide.parquet"
    refused = _sql(root, "SELECT uhugeint FROM test_all_types()", "-o", str(out))
    assert refused.exit_code == 2 and refused.stdout == ""
    assert _one_line(refused.stderr) == (
        "error: column 'uhugeint' (UHUGEINT) holds a value Parquet cannot hold (Parquet holds DECIMAL(38,0) at "
        'most): cast it in the query, e.g. CAST("uhugeint" AS VARCHAR)'
    )
    assert list(tmp_path.iterdir()) == []
    cast = _sql(root, "SELECT CAST(uhugeint AS VARCHAR) AS uhugeint FROM test_all_types()", "-o", str(out))
    assert cast.exit_code == 0 and pq.read_table(out).column("uhugeint").to_pylist()[1] == str(2**128 - 1)


# --- 30.3: the limits bound the whole command ----------------------------------------------


def _slow_text(monkeypatch, seconds: float) -> None:
    """Each batch's conversion takes `seconds` longer: writing, not DuckDB, is what runs long."""
    real = output.Converter.text

    def slow(self, batch):
        time.sleep(seconds)
        return real(self, batch)

    monkeypatch.setattr(output.Converter, "text", slow)


def test_writing_the_result_counts_in_the_timeout_and_leaves_no_file(root, tmp_path, monkeypatch):
    """On main a 300k-row query finished after 83 s under --timeout 2: its rendering was outside the timer."""
    _slow_text(monkeypatch, 0.3)
    out = tmp_path / "result.csv"
    out.write_text("the old result\n")
    started = time.monotonic()
    # 64MB: batches of 14336 rows, so 300000 rows are 21 batches, 6 s of writing
    result = _sql(root, "SELECT * FROM range(300000)", "--timeout", "1", "--memory", "64MB", "-o", str(out))
    assert result.exit_code == 2 and result.stdout == ""
    assert _one_line(result.stderr) == TIME_HIT
    assert time.monotonic() - started < 5
    assert out.read_text() == "the old result\n" and [p.name for p in tmp_path.iterdir()] == ["result.csv"]


def test_a_long_table_shows_its_first_rows_and_says_how_to_get_all(root):
    started = time.monotonic()
    result = _sql(root, "SELECT range AS n, 'x' || range AS s FROM range(300000)", "--timeout", "20")
    assert result.exit_code == 0, result.output
    rows = [line for line in result.stdout.splitlines() if line.startswith("│")]
    assert len(rows) == 40 and rows[0].split("│")[1:3] == ["      0 ", " x0      "]
    assert result.stderr == (
        "300000 rows, the first 40 shown: --max-rows N shows more; --output FILE (or --format csv) writes them all\n"
    )
    assert time.monotonic() - started < 20
    more = _sql(root, "SELECT * FROM range(300000)", "--max-rows", "100")
    assert sum(line.startswith("│") for line in more.stdout.splitlines()) == 100
    long = _sql(root, "SELECT repeat('a', 500) AS s")
    assert "a" * 119 + "…" in long.stdout and "a" * 121 not in long.stdout
    assert long.stderr == "1 row(s); 1 value(s) over 120 characters cut (…): --output FILE gives them whole\n"


def test_a_result_too_wide_for_the_memory_limit_is_stopped_naming_memory(root, tmp_path):
    """On main --memory 100MB let the Arrow result grow the process past 2.5 GB, then `MemoryError: `."""
    out = tmp_path / "wide.csv"
    result = _sql(root, "SELECT range, repeat('a', 5000) AS s FROM range(200000)", "--memory", "100MB", "-o", str(out))
    assert result.exit_code == 2 and result.stdout == ""
    assert _one_line(result.stderr) == (
        "error: the query needed more than its 100MB memory limit (nothing spills to disk; a batch of 22528 rows "
        "of its result took 107 MiB in Python): narrow it (a WHERE, a LIMIT, fewer columns), or raise --memory"
    )
    assert list(tmp_path.iterdir()) == []


def test_python_running_out_of_memory_is_one_message_naming_memory(root, tmp_path, monkeypatch):
    def no_memory(self, batch):
        raise MemoryError

    monkeypatch.setattr(output.Converter, "text", no_memory)
    result = _sql(root, "SELECT * FROM range(10)", "--format", "csv", "-o", str(tmp_path / "x.csv"))
    assert result.exit_code == 2 and result.stdout == "" and "Traceback" not in result.output
    assert _one_line(result.stderr) == (
        "error: the query needed more than its 2GB memory limit (nothing spills to disk; Python ran out of memory "
        "holding its result): narrow it (a WHERE, a LIMIT, fewer columns), or raise --memory"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_result_larger_than_the_memory_limit_streams_to_its_file(root, tmp_path):
    """200 MB of CSV under --memory 64MB: the process grows by far less than the result."""
    exe = Path(sys.executable).with_name("viewmill")

    def peak_kib(query: str, out: Path) -> int:
        probe = (
            "import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
        )
        args = [str(exe), "sql", query, "--state-dir", str(root), "--memory", "64MB", "-o", str(out)]
        done = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return int(done.stdout.split()[-1])

    small = peak_kib("SELECT 1 AS range, 'a' AS s", tmp_path / "small.csv")
    big = peak_kib("SELECT range, repeat('a', 100) AS s FROM range(2000000)", tmp_path / "big.csv")
    size = (tmp_path / "big.csv").stat().st_size
    assert size > 200_000_000 and sum(1 for _ in (tmp_path / "big.csv").open()) == 2_000_001
    assert (big - small) * 1024 < size / 2, (small, big, size)


# --- 33.6: the format from the suffix, files like lake export's, a DuckDB-like table --------


def test_the_output_format_comes_from_the_suffix(root, tmp_path):
    for name, check in (("r.csv", lambda p: p.read_text() == "n,s\n1,a\n"),
                        ("r.json", lambda p: p.read_text() == '{"n":1,"s":"a"}\n'),
                        ("r.jsonl", lambda p: p.read_text() == '{"n":1,"s":"a"}\n'),
                        ("r.ndjson", lambda p: p.read_text() == '{"n":1,"s":"a"}\n'),
                        ("r.parquet", lambda p: pq.read_table(p).to_pylist() == [{"n": 1, "s": "a"}])):  # fmt: skip
        result = _sql(root, "SELECT 1 AS n, 'a' AS s", "-o", str(tmp_path / name))
        assert (result.exit_code, result.stderr) == (0, f"wrote 1 row(s) to {tmp_path / name}\n"), name
        assert check(tmp_path / name), name
    unknown = _sql(root, "SELECT 1", "-o", str(tmp_path / "r.xlsx"))
    assert unknown.exit_code == 2 and unknown.stdout == ""
    assert _one_line(unknown.stderr) == (
        f"error: cannot tell the format of {tmp_path / 'r.xlsx'} from its suffix: name it .csv, .json, .jsonl or "
        ".parquet, or pass --format csv, json, jsonl or parquet"
    )
    forced = _sql(root, "SELECT 1 AS n", "--format", "csv", "-o", str(tmp_path / "r.txt"))
    assert forced.exit_code == 0 and (tmp_path / "r.txt").read_text() == "n\n1\n"
    table = _sql(root, "SELECT 1", "--format", "table", "-o", str(tmp_path / "r.csv"))
    assert table.exit_code == 2 and _one_line(table.stderr) == (
        "error: --output needs --format csv, json, jsonl or parquet (table is for the terminal)"
    )
    assert not (tmp_path / "r.xlsx").exists()


def test_output_files_get_the_mode_lake_export_gives_them(root, tmp_path):
    """--format parquet --output wrote mode 0600 where lake export wrote 0644: both follow the umask."""
    old = os.umask(0o022)
    try:
        for name in ("r.parquet", "r.csv", "r.json"):
            assert _sql(root, "SELECT 1 AS n", "-o", str(tmp_path / name)).exit_code == 0
            assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o644, name
        os.umask(0o077)
        assert _sql(root, "SELECT 1 AS n", "-o", str(tmp_path / "private.parquet")).exit_code == 0
        assert stat.S_IMODE((tmp_path / "private.parquet").stat().st_mode) == 0o600
    finally:
        os.umask(old)


def test_the_table_shows_types_right_aligns_numbers_and_counts_rows_on_stderr(root):
    result = _sql(root, "SELECT 7 AS n, 'ab' AS s, 1.5::DOUBLE AS x, NULL::INTEGER AS missing")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert [re.sub(r"\s+", " ", line) for line in lines[1:5]] == [
        "┃ n ┃ s ┃ x ┃ missing ┃",
        "┃ INTEGER ┃ VARCHAR ┃ DOUBLE ┃ INTEGER ┃",
        "┡━━━━━━━━━╇━━━━━━━━━╇━━━━━━━━╇━━━━━━━━━┩",
        "│ 7 │ ab │ 1.5 │ NULL │",
    ]
    assert lines[4] == "│       7 │ ab      │    1.5 │    NULL │"  # numbers on the right, text on the left
    assert "row" not in result.stdout and result.stderr == "1 row(s)\n"
