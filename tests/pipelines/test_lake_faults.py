"""Faults a lake meets in use, through the CLI and the Prefect flow: a copied state directory,
a lost catalog, deleted views, compaction, damaged files. Real Apertium, DuckLake and Prefect."""

import json
import shutil
from pathlib import Path

import duckdb
import polars as pl
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner
from viewmill.pipelines.cli.app import app
from viewmill.pipelines.recipe import load_recipe
from viewmill.pipelines.run import RunContext, run_recipe
from viewmill.pipelines.state import StatePaths
from viewmill.storage.lake import Lake

from tests.conftest import needs_apertium
from tests.lake_state import change_in_place

pytestmark = needs_apertium
runner = CliRunner()
TABLES = ("sentences", "translations", "views", "pairs", "snapshots", "models")


def _lake_state(lake_root: Path) -> dict:
    """Row counts and snapshot hashes: what "nothing lost" compares."""
    with Lake(lake_root, read_only=True) as lake:
        counts = {table: lake.scalar(f"SELECT count(*) FROM {table}") for table in TABLES}
        hashes = lake.con.execute("SELECT snapshot, content_hash, n_pairs FROM snapshots ORDER BY 1").fetchall()
    return {"counts": counts, "snapshots": hashes}


def _data_files(lake_root: Path) -> list[str]:
    return sorted(str(p.relative_to(lake_root)) for p in (lake_root / "data").rglob("*.parquet"))


@pytest.fixture
def ran(tmp_path, tiny_run_in_small_commits):
    """The tiny recipe, a copy of a state directory after one plain run of it (small commits:
    many files), and the run's summary."""
    recipe, root, summary = tiny_run_in_small_commits
    state = StatePaths(tmp_path / "state")
    shutil.copytree(root, state.root)
    return recipe, state, summary


def test_a_copied_state_directory_runs_and_answers_sql_touching_only_the_copy(ran, tmp_path):
    tiny_recipe, state, summary = ran
    before, files = _lake_state(state.lake), _data_files(state.lake)
    copy = tmp_path / "copy-of-state"
    shutil.copytree(state.root, copy)
    result = runner.invoke(app, ["run", str(tiny_recipe), "--state-dir", str(copy), "--no-prefect"])
    assert result.exit_code == 0, result.output
    after_copy = _lake_state(copy / "lake")
    assert after_copy == before, "the rerun on the copy reuses every view, snapshot and model"
    query = "SELECT count(*) AS n, count(DISTINCT snapshot) AS s FROM pairs"
    sql = runner.invoke(app, ["sql", query, "--state-dir", str(copy), "--format", "json"])
    assert sql.exit_code == 0, sql.output
    assert json.loads(sql.output.splitlines()[0]) == {"n": summary["snapshot"]["n_pairs"], "s": 1}
    with Lake(copy / "lake", read_only=True) as lake:
        assert lake.scalar("SELECT count(*) FROM runs") == 2
    with Lake(state.lake, read_only=True) as lake:
        assert lake.scalar("SELECT count(*) FROM runs") == 1, "the run went to the copy's lake only"
    assert _lake_state(state.lake) == before and _data_files(state.lake) == files


def test_a_run_against_a_data_folder_without_its_catalog_is_refused(ran):
    tiny_recipe, state, _ = ran
    files = _data_files(state.lake)
    for catalog in state.lake.glob("catalog.sqlite*"):
        catalog.unlink()
    result = runner.invoke(app, ["run", str(tiny_recipe), "--state-dir", str(state.root), "--no-prefect"])
    assert result.exit_code == 2, result.output
    message = " ".join(result.output.split())
    assert f"catalog {state.lake / 'catalog.sqlite'} is missing" in message
    assert f"data folder {state.lake / 'data'} holds {len(files)} Parquet file(s)" in message
    assert "viewmill lake init" in message and "Traceback" not in result.output
    assert not (state.lake / "catalog.sqlite").exists() and _data_files(state.lake) == files

    init = runner.invoke(app, ["lake", "init", "--state-dir", str(state.root)])
    assert init.exit_code == 0 and "moved the data that had no catalog to" in init.output
    assert _data_files(state.lake) == [] and len(list(state.lake.glob("data.orphaned-*/**/*.parquet"))) == len(files)
    again = runner.invoke(app, ["lake", "init", "--state-dir", str(state.root)])
    assert again.exit_code == 2 and "already a lake" in again.output


@pytest.mark.slow
def test_views_deleted_behind_the_shard_cache_are_made_again_by_the_flow(tmp_path, tiny_recipe, prefect_server):
    from viewmill.pipelines.orchestration.flows import augment_flow

    state_dir = tmp_path / "state"
    first = augment_flow(str(tiny_recipe), str(state_dir))
    lake_root = state_dir / "lake"
    before = _lake_state(lake_root)
    with Lake(lake_root) as lake:
        gone = lake.arrow("SELECT sentence_id FROM views WHERE augmenter = 'bt_ca' ORDER BY sentence_id LIMIT 5")
        with lake.transaction():  # viewmill's write path, so the delete file's hash is recorded
            lake.con.execute(
                "DELETE FROM views WHERE augmenter = 'bt_ca' AND sentence_id IN (SELECT unnest(?))",
                [gone["sentence_id"].to_pylist()],
            )
        assert lake.scalar("SELECT count(*) FROM views") == before["counts"]["views"] - 5
    second = augment_flow(str(tiny_recipe), str(state_dir))
    assert second["augment"]["bt_ca"]["new_views"] == 5 and second["augment"]["bt_es"]["new_views"] == 0
    assert second["augment"]["bt_ca"]["cache"]["misses"] == 0, "regenerated from the translation cache"
    assert second["snapshot"]["name"] == first["snapshot"]["name"] and not second["snapshot"]["created"]
    assert second["snapshot"]["content_hash"] == first["snapshot"]["content_hash"]
    assert _lake_state(lake_root) == before


def test_compact_leaves_raw_parquet_counts_equal_to_the_catalog(ran):
    _, state, _ = ran
    before = _lake_state(state.lake)
    tables = ("views", "pairs", "sentences", "translations")  # tables viewmill never deletes from

    def raw(table: str) -> int:
        glob = f"{state.lake}/data/main/{table}/**/*.parquet"
        return duckdb.sql(f"SELECT count(*) FROM read_parquet('{glob}', hive_partitioning = false)").fetchone()[0]

    assert raw("views") == before["counts"]["views"], "the run's finish step deleted the merged-away files"
    result = runner.invoke(app, ["lake", "compact", "--state-dir", str(state.root)])
    assert result.exit_code == 0 and "deleted" in result.output, result.output
    assert _lake_state(state.lake) == before
    for table in tables:
        assert raw(table) == before["counts"][table], table
    for table in ("views", "pairs"):
        files = f"{state.lake}/data/main/{table}/**/*.parquet"
        assert (
            pl.scan_parquet(files, hive_partitioning=False).select(pl.len()).collect().item()
            == (before["counts"][table])
        )


def test_verify_reports_a_lost_file_and_repair_then_a_rerun_restore_the_lake(ran):
    tiny_recipe, state, summary = ran
    before = _lake_state(state.lake)
    ok = runner.invoke(app, ["lake", "verify", "--state-dir", str(state.root)])
    assert ok.exit_code == 0 and "lake ok" in ok.output, ok.output
    with Lake(state.lake, read_only=True) as lake:
        listed = lake.arrow("SELECT data_file FROM ducklake_list_files('lake', 'views')")["data_file"].to_pylist()
    lost = next(path for path in listed if "augmenter=bt_ca" in path)
    lost_rows = duckdb.sql(f"SELECT count(*) FROM read_parquet('{lost}')").fetchone()[0]
    Path(lost).unlink()

    damaged = runner.invoke(app, ["lake", "verify", "--state-dir", str(state.root)])
    assert damaged.exit_code == 1, damaged.output
    assert f"missing    views            {lost}" in damaged.output and "viewmill lake repair" in damaged.output
    repaired = runner.invoke(app, ["lake", "repair", "--state-dir", str(state.root)])
    assert repaired.exit_code == 0, repaired.output
    kept = before["counts"]["views"] - lost_rows
    assert f"rebuilt views from its intact files: {kept} row(s) kept" in repaired.output
    assert _lake_state(state.lake)["counts"] == {**before["counts"], "views": kept}
    assert runner.invoke(app, ["lake", "verify", "--state-dir", str(state.root)]).exit_code == 0

    rerun = run_recipe(RunContext(load_recipe(tiny_recipe, ["execution.chunk_sentences=6"]), state))
    assert rerun["augment"]["bt_ca"]["new_views"] == lost_rows and rerun["augment"]["bt_es"]["new_views"] == 0
    assert rerun["snapshot"]["name"] == summary["snapshot"]["name"] and not rerun["snapshot"]["created"]
    assert _lake_state(state.lake) == before


def _change_a_text(lake_root: Path, table: str, column: str) -> str:
    """Change one stored text inside a current data file of `table` in place (same length, so
    the file keeps its size and footer); returns the file."""
    with Lake(lake_root, read_only=True) as lake:
        files = lake.arrow(f"SELECT data_file FROM ducklake_list_files('lake', '{table}')")["data_file"].to_pylist()
    for path in sorted(files):
        data = Path(path).read_bytes()
        for text in pq.read_table(path, columns=[column])[column].to_pylist():
            old = text.encode("utf-8")
            if len(old) >= 12 and data.count(old) >= 1 and old.upper() != old:
                change_in_place(path, old, old.upper())
                return path
    raise AssertionError(f"no stored {table}.{column} text found verbatim in its files")


def test_a_rerun_refuses_to_pair_views_changed_in_place_and_repair_then_a_rerun_restore_them(ran):
    tiny_recipe, state, summary = ran
    before = _lake_state(state.lake)
    changed = _change_a_text(state.lake, "views", "text")
    refused = runner.invoke(app, ["run", str(tiny_recipe), "--state-dir", str(state.root), "--no-prefect"])
    assert refused.exit_code == 1, refused.output
    message = " ".join(refused.output.split())
    assert "cannot pair the views of corpus '" in message and "Traceback" not in refused.output
    assert f"the views data file {changed} changed since viewmill wrote it" in message
    assert "run `viewmill lake verify` to list the damage and `viewmill lake repair`" in message
    assert _lake_state(state.lake) == before, "no snapshot frozen from the changed texts"

    repaired = runner.invoke(app, ["lake", "repair", "--state-dir", str(state.root)])
    assert repaired.exit_code == 0 and f"lost file: {changed}" in repaired.output, repaired.output
    rerun = run_recipe(RunContext(load_recipe(tiny_recipe, ["execution.chunk_sentences=6"]), state))
    assert rerun["snapshot"]["name"] == summary["snapshot"]["name"] and not rerun["snapshot"]["created"]
    assert _lake_state(state.lake) == before, "the lost views are remade from the translation cache"


def test_training_refuses_a_snapshot_whose_pairs_file_changed_in_place(ran):
    tiny_recipe, state, summary = ran
    name, before = summary["snapshot"]["name"], _lake_state(state.lake)
    changed = _change_a_text(state.lake, "pairs", "text_a")
    expected = f"cannot train on pairs snapshot '{name}': the pairs data file {changed} changed since viewmill wrote it"
    command = ["train", str(tiny_recipe), "--snapshot", name, "--set", "train.steps=5"]
    early = runner.invoke(app, [*command, "--state-dir", str(state.root), "--no-prefect"])
    assert early.exit_code == 2 and expected in " ".join(early.output.split()), early.output
    run = runner.invoke(app, ["run", str(tiny_recipe), "--set", "train.steps=5", "--state-dir", str(state.root),
                              "--no-prefect"])  # fmt: skip
    assert run.exit_code == 1 and expected in " ".join(run.output.split()), run.output
    assert "Traceback" not in early.output + run.output
    assert _lake_state(state.lake) == before, "no model trained on the changed pairs"
