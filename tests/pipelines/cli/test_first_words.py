"""Usage errors and missing files are named before a command imports anything heavy: the
process that refuses them has loaded neither torch, transformers, Prefect, the recipe schema, pyarrow nor DuckDB
(benchmarks/first_words.py times them)."""

import json
import subprocess
import sys

import pytest

HEAVY = ("torch", "transformers", "prefect", "viewmill.pipelines.recipe", "pyarrow", "duckdb")
# `viewmill ARGS`, then the heavy modules it loaded, as JSON on the last line of stderr.
PROBE = f"""
import atexit, json, sys
atexit.register(lambda: print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]), file=sys.stderr))
sys.argv = ["viewmill", *sys.argv[1:]]
from viewmill.pipelines.cli.app import app
app()
"""


def _refused(tmp_path, *args: str) -> tuple[str, list[str]]:
    done = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    *lines, loaded = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    return " ".join(" ".join(lines).split()), json.loads(loaded)


@pytest.mark.parametrize("command", ["run", "train", "sweep", "plan", "serve", "deploy"])
def test_a_missing_recipe_is_named_before_anything_heavy_loads(tmp_path, command):
    message, loaded = _refused(tmp_path, command, "recipes/nope.yaml")
    assert message == "error: recipe not found: recipes/nope.yaml (try recipes/demo.yaml)"
    assert loaded == []


def test_options_that_do_not_go_together_and_an_unknown_snapshot_are_named_before_the_recipe_loads(tmp_path):
    (tmp_path / "r.yaml").write_text("name: r\n", encoding="utf-8")  # only its existence is checked first
    message, loaded = _refused(tmp_path, "run", "r.yaml", "--no-prefect", "--dask", "local:2")
    assert message == "error: --dask runs shards as Prefect tasks: drop --no-prefect, or drop --dask"
    assert loaded == []
    message, loaded = _refused(tmp_path, "train", "r.yaml", "--snapshot", "nope", "--state-dir", "s")
    assert message.startswith(f"error: no lake at {tmp_path / 's' / 'lake'}: run a recipe first")
    assert loaded == []


def test_a_snapshot_in_a_lake_without_snapshots_is_refused_from_the_catalog_alone(tmp_path):
    from viewmill.storage.lake import Lake

    (tmp_path / "r.yaml").write_text("name: r\n", encoding="utf-8")
    Lake(tmp_path / "s" / "lake").close()
    message, loaded = _refused(tmp_path, "train", "r.yaml", "--snapshot", "nope", "--state-dir", "s")
    assert message == "error: no pairs snapshot named 'nope' (known: none)"
    assert loaded == []


@pytest.mark.parametrize("args", [["run"], ["rnu"], ["sql", "--state-dir", "s"]], ids=" ".join)
def test_usage_panels_come_before_anything_heavy_loads(tmp_path, args):
    message, loaded = _refused(tmp_path, *args)
    assert "Usage:" in message or "No such command" in message
    assert loaded == []


def test_a_plain_query_loads_no_writer_and_no_parquet_reader(tmp_path):
    # `viewmill sql` opens the lake read-only: the writer lock (filelock), pyarrow's Parquet
    # module, the recipe schema and torch are not its to load (issue 34.8).
    from viewmill.storage.lake import Lake

    Lake(tmp_path / "s" / "lake").close()
    watched = ("filelock", "pyarrow.parquet", "viewmill.pipelines.recipe", "torch", "prefect", "pyarrow", "duckdb")
    probe = PROBE.replace(repr(HEAVY), repr(watched))
    done = subprocess.run([sys.executable, "-c", probe, "sql", "SELECT 1", "--state-dir", "s"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stderr.strip().splitlines()[-1]) == ["pyarrow", "duckdb"]
