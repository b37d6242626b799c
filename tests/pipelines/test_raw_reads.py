"""The data folder's raw Parquet after a real run, with no `viewmill lake compact`: pyarrow and
Polars read each appended table's rows exactly once, as the catalog counts them; a table with
deletes (evals) is exported whole instead. Real Apertium, DuckLake, pyarrow and Polars."""

import shutil
from pathlib import Path

import polars as pl
import pyarrow.dataset as ds
import pytest
from typer.testing import CliRunner
from viewmill.pipelines.cli.app import app
from viewmill.pipelines.recipe import load_recipe
from viewmill.pipelines.run import RunContext, run_recipe
from viewmill.pipelines.state import StatePaths
from viewmill.storage.integrity import verify_lake
from viewmill.storage.lake import Lake
from viewmill.storage.schema import VIEWS

from tests.conftest import needs_apertium

pytestmark = needs_apertium
runner = CliRunner()
APPENDED = ("sentences", "translations", "views", "pairs")  # tables viewmill never deletes from


def _catalog(lake_root: Path) -> dict[str, set[str]]:
    keys = {"sentences": "sentence_id", "translations": "cache_key || '#' || rank", "views": "view_id",
            "pairs": "pair_id"}  # fmt: skip
    with Lake(lake_root, read_only=True) as lake:
        return {t: set(lake.arrow(f"SELECT {k} AS k FROM {t}")["k"].to_pylist()) for t, k in keys.items()}


def _raw_counts(lake_root: Path, table: str) -> tuple[int, int]:
    """Rows of a table's folder as pyarrow.dataset and polars.scan_parquet read it, as documented."""
    folder = lake_root / "data" / "main" / table
    arrow = ds.dataset(folder, format="parquet").count_rows()
    polars = _scan(lake_root, table).select(pl.len()).collect().item()
    return arrow, polars


def _scan(lake_root: Path, table: str) -> pl.LazyFrame:
    """The Polars read of docs/lake.md: merged files carry DuckLake's `_ducklake_internal_*` columns,
    later commits' files do not, so the scan takes both and drops them."""
    files = f"{lake_root}/data/main/{table}/**/*.parquet"
    scan = pl.scan_parquet(files, hive_partitioning=False, extra_columns="ignore", missing_columns="insert")
    return scan.select(pl.exclude("^_ducklake_internal_.*$"))


def _assert_raw_is_the_catalog(lake_root: Path) -> None:
    catalog = _catalog(lake_root)
    for table in APPENDED:
        assert _raw_counts(lake_root, table) == (len(catalog[table]),) * 2, table
    views = _scan(lake_root, "views").collect()
    assert set(views["view_id"].to_list()) == catalog["views"] and views.columns == VIEWS.names
    sentences = ds.dataset(lake_root / "data" / "main" / "sentences", format="parquet")
    assert set(sentences.to_table(columns=["sentence_id"])["sentence_id"].to_pylist()) == catalog["sentences"]


@pytest.fixture
def ran(tmp_path, tiny_run_in_small_commits) -> tuple[Path, StatePaths, dict]:
    """The tiny recipe and a copy of the state after one plain run of it in small commits (many
    files), nothing compacted by hand; the run's summary."""
    recipe, root, summary = tiny_run_in_small_commits
    state = StatePaths(tmp_path / "state")
    shutil.copytree(root, state.root)
    return recipe, state, summary


def test_raw_parquet_after_a_run_holds_each_row_once_for_pyarrow_and_polars(ran):
    _, state, summary = ran
    _assert_raw_is_the_catalog(state.lake)
    with Lake(state.lake, read_only=True) as lake:
        assert lake.scalar("SELECT count(*) FROM views") > 20 and lake.scalar("SELECT count(*) FROM translations") > 20
        assert lake.scalar("SELECT count(*) FROM pairs") == summary["snapshot"]["n_pairs"]
        assert verify_lake(lake).problems == [], "every file the finish step made has a recorded hash"
        scheduled = "SELECT count(*) FROM __ducklake_metadata_lake.ducklake_files_scheduled_for_deletion"
        assert lake.scalar(scheduled) == 0, "no file waits for deletion: the data folder is the current state"


def test_a_second_run_keeps_raw_reads_right_and_the_first_snapshot_readable(ran):
    tiny_recipe, state, first = ran
    with Lake(state.lake, read_only=True) as lake:
        pinned = lake.scalar("SELECT lake_version FROM snapshots")
        first_views = lake.scalar("SELECT count(*) FROM views")
    # New filters: new views (from the translation cache), a new snapshot, compaction again.
    second = run_recipe(
        RunContext(load_recipe(tiny_recipe, ["execution.chunk_sentences=6", "filters.max_length_ratio=2.5"]), state)
    )
    assert second["snapshot"]["name"] != first["snapshot"]["name"]
    _assert_raw_is_the_catalog(state.lake)
    with Lake(state.lake, read_only=True) as lake:
        assert lake.scalar("SELECT count(*) FROM views") == 2 * first_views
        assert lake.scalar(f"SELECT count(*) FROM views AT (VERSION => {pinned})") == first_views
        assert verify_lake(lake).problems == []


def test_export_table_writes_a_tables_current_rows_for_other_tools(ran, tmp_path):
    _, state, _ = ran
    out = tmp_path / "out" / "evals.parquet"
    result = runner.invoke(app, ["lake", "export-table", "evals", str(out), "--state-dir", str(state.root)])
    assert result.exit_code == 0, result.output
    with Lake(state.lake, read_only=True) as lake:
        expected = lake.scalar("SELECT count(*) FROM evals")
    assert expected > 0 and pl.read_parquet(out).height == expected
    assert f"wrote {expected} row(s) of evals" in result.stderr
    inside = runner.invoke(app, ["lake", "export-table", "views", str(state.lake / "v.parquet"),
                                 "--state-dir", str(state.root)])  # fmt: skip
    assert inside.exit_code == 2 and "inside the lake" in " ".join(inside.output.split())
    unknown = runner.invoke(app, ["lake", "export-table", "nope", str(out), "--state-dir", str(state.root)])
    assert unknown.exit_code == 2 and "has no table 'nope'" in unknown.output
