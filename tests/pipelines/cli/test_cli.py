import csv
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner
from viewmill.pipelines.cli.app import app
from viewmill.pipelines.recipe import load_recipe
from viewmill.pipelines.run import RunContext, run_recipe
from viewmill.pipelines.state import StatePaths
from viewmill.storage.lake import Lake

from tests.conftest import needs_apertium, write_tiny_recipe

runner = CliRunner()


@pytest.fixture
def state_with_run(tmp_path, read_lake):
    """The tiny recipe, a copy of the read-only tests' state directory (one run of that recipe)
    for a test to change, and the run's summary."""
    built, summary = read_lake
    state = StatePaths(tmp_path / "state")
    shutil.copytree(built.root, state.root)
    return built.root.parent / "tiny.yaml", state, summary


@needs_apertium
def test_sql_answers_questions_over_the_lake(state_with_run):
    _, state, summary = state_with_run
    query = "SELECT augmenter, status, count(*) AS n FROM views GROUP BY ALL ORDER BY ALL"
    result = runner.invoke(app, ["sql", query, "--state-dir", str(state.root), "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert sum(r["n"] for r in rows if r["augmenter"] == "bt_es") == 20
    table = runner.invoke(app, ["sql", "SELECT count(*) AS pairs FROM pairs", "--state-dir", str(state.root)])
    assert str(summary["snapshot"]["n_pairs"]) in table.output and "1 row(s)" in table.output
    snaps = runner.invoke(app, ["lake", "snapshots", "--state-dir", str(state.root)])
    assert summary["snapshot"]["name"] in snaps.output
    out = state.root.parent / "pairs.jsonl"
    name = summary["snapshot"]["name"]
    exported = runner.invoke(app, ["lake", "export", name, str(out), "--state-dir", str(state.root)])
    assert exported.exit_code == 0, exported.output
    assert len(out.read_text().splitlines()) == summary["snapshot"]["n_pairs"]
    unknown = runner.invoke(app, ["lake", "export", "recipe-nope", str(out), "--state-dir", str(state.root)])
    assert unknown.exit_code == 2 and "no pairs snapshot named 'recipe-nope'" in unknown.output


@needs_apertium
def test_bad_sql_is_one_clear_error(read_lake):
    state, _ = read_lake
    result = runner.invoke(app, ["sql", "SELECT nope FROM views", "--state-dir", str(state.root)])
    assert result.exit_code == 2 and "query failed" in result.output and "nope" in result.output


def test_sql_without_a_lake_says_how_to_make_one(tmp_path):
    result = runner.invoke(app, ["sql", "SELECT 1", "--state-dir", str(tmp_path)])
    assert result.exit_code == 2 and "viewmill run recipes/demo.yaml" in result.output


def test_run_with_a_broken_recipe_exits_2_with_the_field_named(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: r\ncorpus: {files: [x.txt]}\naugmenters: []\npair: {view_a: a, view_b: b}\n")
    result = runner.invoke(app, ["run", str(recipe), "--state-dir", str(tmp_path / "s")])
    assert result.exit_code == 2 and "augmenters" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "s").exists()


@needs_apertium
def test_train_on_an_existing_snapshot_records_a_new_model(state_with_run):
    from viewmill.storage.lake import Lake

    tiny_recipe, state, summary = state_with_run
    name = summary["snapshot"]["name"]
    args = ["train", str(tiny_recipe), "--snapshot", name, "--state-dir", str(state.root), "--no-prefect"]
    result = runner.invoke(app, [*args, "--set", "train.encoder_lr=5e-3"])
    assert result.exit_code == 0, result.output
    with Lake(state.lake, read_only=True) as lake:
        models = lake.arrow("SELECT snapshot, train_config FROM models ORDER BY created_at").to_pylist()
        runs = lake.arrow("SELECT flow, counts FROM runs ORDER BY started_at")["flow"].to_pylist()
    assert len(models) == 2 and {m["snapshot"] for m in models} == {name}
    assert json.loads(models[1]["train_config"])["train_config"]["encoder_lr"] == 5e-3
    assert runs == ["plain", "plain"]
    args[3] = "recipe-nope"
    missing = runner.invoke(app, args)
    assert missing.exit_code == 2 and "no pairs snapshot named 'recipe-nope'" in missing.output


def test_dask_without_prefect_and_a_malformed_dask_address_are_refused_before_anything_runs(tmp_path, tiny_recipe):
    state = tmp_path / "state"
    local = runner.invoke(
        app, ["run", str(tiny_recipe), "--no-prefect", "--dask", "local:2", "--state-dir", str(state)]
    )
    assert local.exit_code == 2 and "drop --no-prefect, or drop --dask" in local.output
    sweep = runner.invoke(app, ["sweep", str(tiny_recipe), "--state-dir", str(state)])
    assert sweep.exit_code == 2 and "has no sweep section" in sweep.output
    assert not state.exists()


def test_a_malformed_dask_address_names_the_form_to_use():
    from viewmill.pipelines.orchestration.flows import task_runner
    from viewmill.pipelines.recipe import RecipeError

    with pytest.raises(RecipeError, match="write local:N"):
        task_runner("local:two")


# --- version, -h, stdout/stderr and exit codes (issue 15) ---


@pytest.fixture(scope="module")
def read_lake(tmp_path_factory, tiny_model):
    """One lake for the read-only tests (they never write to it; the others change a copy)."""
    folder = tmp_path_factory.mktemp("read-lake")
    state = StatePaths(folder / "state")
    summary = run_recipe(RunContext(load_recipe(write_tiny_recipe(folder, tiny_model)), state))
    return state, summary


def _command_paths(command, prefix=()):
    yield prefix
    for name, sub in getattr(command, "commands", {}).items():
        yield from _command_paths(sub, (*prefix, name))


def test_version_and_h_work_on_every_command():
    from typer.main import get_command

    from viewmill import __version__

    version = runner.invoke(app, ["--version"])
    assert version.exit_code == 0 and version.stdout == f"viewmill {__version__}\n"
    paths = list(_command_paths(get_command(app)))
    assert {("sql",), ("run",), ("lake",), ("lake", "export")} <= set(paths)
    for path in paths:
        short = runner.invoke(app, [*path, "-h"], prog_name="viewmill")
        assert short.exit_code == 0, (path, short.output)
        assert f"Usage: viewmill {' '.join(path)}".rstrip() in short.stdout, (path, short.stdout)
        assert short.stdout == runner.invoke(app, [*path, "--help"], prog_name="viewmill").stdout


def _viewmill(*args: str) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("viewmill")
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=300)


NESTED_QUERY = "SELECT view_id, augmenter, provenance, quality FROM views ORDER BY view_id"


@needs_apertium
def test_sql_csv_and_json_stdout_hold_the_result_and_nothing_else(read_lake):
    state, _ = read_lake
    with Lake(state.lake, read_only=True) as lake:
        expected = lake.arrow(NESTED_QUERY).to_pylist()
    assert len(expected) == 40
    as_csv = _viewmill("sql", NESTED_QUERY, "--state-dir", str(state.root), "--format", "csv")
    assert as_csv.returncode == 0, as_csv.stderr
    lines = as_csv.stdout.splitlines()
    assert lines[0] == "view_id,augmenter,provenance,quality"
    rows = list(csv.reader(io.StringIO(as_csv.stdout)))
    assert len(rows) == 41 and all(len(row) == 4 for row in rows)
    for row, want in zip(rows[1:], expected, strict=True):
        assert row[:2] == [want["view_id"], want["augmenter"]]
        assert json.loads(row[2])["engines"] == want["provenance"]["engines"]
        quality = json.loads(row[3])
        assert quality["chrf_to_source"] == pytest.approx(want["quality"]["chrf_to_source"])
        assert set(quality) == set(want["quality"])
    as_json = _viewmill("sql", NESTED_QUERY, "--state-dir", str(state.root), "--format", "json")
    assert as_json.returncode == 0, as_json.stderr
    objects = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert len(objects) == 40 and as_json.stdout.endswith("}\n")
    assert [o["view_id"] for o in objects] == [w["view_id"] for w in expected]
    assert objects[0]["provenance"]["engines"] == expected[0]["provenance"]["engines"]
    assert objects[0]["quality"]["chrf_to_source"] == pytest.approx(expected[0]["quality"]["chrf_to_source"])


@needs_apertium
def test_sql_writes_parquet_keeping_nested_types(read_lake, tmp_path):
    import pyarrow.parquet as pq

    state, _ = read_lake
    out = tmp_path / "views.parquet"
    args = ["sql", NESTED_QUERY, "--state-dir", str(state.root), "--format", "parquet"]
    written = runner.invoke(app, [*args, "--output", str(out)])
    assert written.exit_code == 0, written.output
    assert written.stdout == "" and "wrote 40 row(s)" in written.stderr
    table = pq.read_table(out)
    assert table.num_rows == 40 and pa.types.is_struct(table.schema.field("quality").type)
    assert pa.types.is_list(table.schema.field("provenance").type.field("engines").type)
    assert [p.name for p in tmp_path.iterdir()] == ["views.parquet"]  # no temporary file left
    to_stdout = runner.invoke(app, args)
    assert to_stdout.exit_code == 2 and "add --output FILE" in to_stdout.stderr and to_stdout.stdout == ""
    table_to_file = runner.invoke(app, ["sql", "SELECT 1", "--state-dir", str(state.root), "--format", "table",
                                        "-o", str(out)])  # fmt: skip
    assert table_to_file.exit_code == 2
    assert "--output needs --format csv, json, jsonl or parquet" in table_to_file.stderr
    as_csv = runner.invoke(app, [*args[:-1], "csv", "--output", str(tmp_path / "views.csv")])
    assert as_csv.exit_code == 0 and len((tmp_path / "views.csv").read_text().splitlines()) == 41
    table = runner.invoke(app, ["sql", NESTED_QUERY + " LIMIT 1", "--state-dir", str(state.root)])
    assert table.exit_code == 0 and '"chrf_to_source":' in table.stdout and table.stderr.startswith("1 row(s)")


def test_usage_errors_exit_2_on_every_command_kind(tmp_path):
    for args in (["nope"], ["run", "--nope"], ["sql"], ["sql", "SELECT 1", "--format", "xml"],
                 ["lake", "export"], ["lake", "snapshots", "--nope"], ["eval"]):  # fmt: skip
        result = runner.invoke(app, args, prog_name="viewmill")
        assert result.exit_code == 2, (args, result.output)
        assert "Usage: viewmill" in result.stderr and result.stdout == "", args


def test_bad_input_exits_2_with_one_message(tmp_path, monkeypatch):
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: r\ncorpus: {files: [x.txt]}\naugmenters: []\npair: {view_a: a, view_b: b}\n")
    cases = {
        "sql": ["sql", "SELECT 1", "--state-dir", str(tmp_path / "none")],
        "lake": ["lake", "snapshots", "--state-dir", str(tmp_path / "none")],
        "train": ["train", str(recipe), "--state-dir", str(tmp_path / "s")],
        "serve": ["serve", str(tmp_path / "missing.yaml"), "--state-dir", str(tmp_path / "s")],
        "eval": ["eval", "embedded:nope", "--suite", str(tmp_path / "missing.yaml"), "--state-dir", str(tmp_path)],
    }
    for kind, args in cases.items():
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (kind, result.output)
        assert result.stderr.startswith("error: ") and result.stdout == "", (kind, result.output)
        assert "Traceback" not in result.output


@needs_apertium
def test_a_run_that_fails_after_its_checks_exits_1_and_is_recorded(state_with_run):
    tiny_recipe, state, _ = state_with_run
    args = ["run", str(tiny_recipe), "--no-prefect", "--state-dir", str(state.root), "--set", "train.batch_size=64"]
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output
    assert "error: failed: the snapshot has 18 pairs, fewer than one batch of 64" in result.stderr
    assert "Traceback" not in result.output
    with Lake(state.lake, read_only=True) as lake:
        last = lake.arrow("SELECT status, error FROM runs ORDER BY started_at DESC LIMIT 1").to_pylist()[0]
    assert last["status"] == "failed" and "fewer than one batch of 64" in last["error"]


@needs_apertium
def test_an_unexpected_error_in_any_command_exits_1_without_a_traceback(read_lake, tmp_path, monkeypatch):
    state, summary = read_lake
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    # The export's folder cannot be made (a file is in the way): an OSError no command expects.
    args = ["lake", "export", summary["snapshot"]["name"], str(blocker / "p.parquet"), "--state-dir", str(state.root)]
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith("error: failed: FileExistsError: ") and "Traceback" not in result.output
    assert result.stdout == ""
    monkeypatch.setenv("VIEWMILL_DEBUG", "1")
    debug = runner.invoke(app, args)
    assert debug.exit_code == 1 and isinstance(debug.exception, FileExistsError)


@needs_apertium
def test_a_reader_that_stops_early_ends_the_command_quietly(read_lake):
    state, _ = read_lake
    exe = Path(sys.executable).with_name("viewmill")
    query = "SELECT * FROM range(2000000)"  # about 15 MB of CSV: far more than a pipe holds
    args = [str(exe), "sql", query, "--state-dir", str(state.root), "--format", "csv"]
    with subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        assert proc.stdout.read(6) == b"range\n"
        proc.stdout.close()  # as `| head` does
        stderr = proc.stderr.read().decode()
        assert proc.wait(timeout=300) == 141, stderr  # 128 + SIGPIPE, as a Unix tool reports it
    assert stderr == ""


@needs_apertium
def test_error_messages_print_brackets_as_written(read_lake):
    state, _ = read_lake
    result = runner.invoke(app, ["sql", 'SELECT "[/x] [bold]" FROM views', "--state-dir", str(state.root)])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: query failed: ") and '"[/x] [bold]"' in result.stderr


# --- start-up, typos and help (issue 23.8, 23.11) ---

HEAVY = ("torch", "transformers", "sentence_transformers", "prefect")
PROBE = """
import json, sys
sys.argv = ["viewmill", *sys.argv[1:]]
from viewmill.pipelines.cli.app import app
code = None
try:
    app()
except SystemExit as exc:
    code = exc.code
top = sorted({name.partition(".")[0] for name in sys.modules})
print(json.dumps({"code": code, "modules": top}), file=sys.stderr)
"""


def _loaded_after(*args: str) -> tuple[int, set[str]]:
    """Which top-level modules a fresh process has imported once `viewmill ARGS` is done."""
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=300)
    report = json.loads(done.stderr.strip().splitlines()[-1])
    return report["code"], set(report["modules"])


def test_version_and_sql_start_without_torch_transformers_or_prefect(tmp_path):
    code, version = _loaded_after("--version")
    assert code == 0 and not version & {*HEAVY, "polars", "pyarrow", "duckdb", "pydantic", "sklearn", "scipy"}, (
        version & {*HEAVY, "polars", "pyarrow", "duckdb", "pydantic", "sklearn", "scipy"}
    )
    code, sql_help = _loaded_after("sql", "--help")
    assert code == 0 and not sql_help & {*HEAVY, "polars", "sklearn", "scipy", "sacrebleu"}
    state = tmp_path / "state"
    assert runner.invoke(app, ["lake", "init", "--state-dir", str(state)]).exit_code == 0
    code, sql = _loaded_after("sql", "SELECT 1", "--state-dir", str(state))
    # pandas comes with DuckDB scanning a pyarrow object (0.4 s); the settings' pydantic-settings
    # (0.1 s) and polars (CSV only) a plain query does not need either.
    unneeded = {*HEAVY, "pandas", "polars", "pydantic_settings", "sklearn", "scipy"}
    assert code in (0, None) and not sql & unneeded, sql & unneeded
    assert "duckdb" in sql, "the probe sees what the command imported"


@pytest.mark.parametrize(
    ("environment", "flag"),
    [
        ({}, None),
        ({"VIEWMILL_CATALOG": "duckdb"}, None),
        ({"viewmill_catalog": "sqlite:/x"}, None),
        ({"VIEWMILL_CATALOG": ""}, None),
        ({"VIEWMILL_CATALOG": "duckdb"}, "postgres:dbname=v"),
    ],
)
def test_sql_reads_the_catalog_setting_as_the_settings_do(monkeypatch, environment, flag):
    from viewmill.pipelines.cli.common import catalog_spec, load_settings

    for name in [name for name in os.environ if name.lower() == "viewmill_catalog"]:
        monkeypatch.delenv(name)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert catalog_spec(flag) == load_settings(flag).catalog_spec()


def test_mistyped_commands_and_options_are_answered_with_the_close_names():
    command = runner.invoke(app, ["sq", "SELECT 1"], prog_name="viewmill")
    assert command.exit_code == 2 and "No such command 'sq'. Did you mean 'sql'?" in command.stderr
    sub = runner.invoke(app, ["lake", "verfy"], prog_name="viewmill")
    assert sub.exit_code == 2 and "Did you mean 'verify'?" in sub.stderr
    option = runner.invoke(app, ["sql", "SELECT 1", "--stat-dir", "x"], prog_name="viewmill")
    assert option.exit_code == 2 and "No such option: --stat-dir" in option.stderr
    assert "--state-dir" in option.stderr.partition("No such option: --stat-dir")[2]


def test_version_is_a_plain_flag_and_help_reads_in_paragraphs():
    from typer.main import get_command

    wide = {"COLUMNS": "200"}
    top = runner.invoke(app, ["-h"], prog_name="viewmill", env=wide)
    line = next(line for line in top.stdout.splitlines() if "--version" in line)
    assert "BOOL" not in line.upper() and "--no-version" not in line and "print the version and exit" in line
    for path in _command_paths(get_command(app)):
        command = get_command(app)
        for name in path:
            command = command.commands[name]
        for paragraph in (command.help or "").split("\n\n"):
            assert "\n" not in paragraph, (path, paragraph)  # the terminal wraps it, not the docstring
    sql = runner.invoke(app, ["sql", "-h"], prog_name="viewmill", env=wide)
    assert "one read-only query, under a time and memory limit; only the result goes to stdout" in sql.stdout
