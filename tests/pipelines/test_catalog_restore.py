"""A catalog backup put back after a later run: the later run's finish step merged small files
and deleted the merged-away ones, so the older catalog lists files that are gone. A run refuses
up front (exit 2, with or without Prefect) naming a missing file, the cause and the mend; the
mend (verify, repair, rerun) gives back every row and the same snapshots."""

from __future__ import annotations

import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

from typer.testing import CliRunner
from viewmill.pipelines.cli.app import app
from viewmill.storage.lake import Lake
from viewmill.storage.lake_files import catalog_files

from tests.conftest import SENTENCES, needs_apertium, write_round_trip_recipe
from tests.pipelines.cli.test_output_guard import lake_bytes

pytestmark = needs_apertium
runner = CliRunner()
TABLES = ("sentences", "translations", "views", "pairs", "snapshots")


def _recipe(folder: Path, sentences: list[str]) -> Path:
    """restore.yaml: two Apertium round trips, in chunks of 4 (several commits: files to merge)."""
    return write_round_trip_recipe(folder, "restore", sentences, extra="execution: {chunk_sentences: 4}\n")


def _state(lake_root: Path) -> dict:
    """Row counts and snapshot hashes: what "nothing lost" compares."""
    with Lake(lake_root, read_only=True) as lake:
        counts = {table: lake.scalar(f"SELECT count(*) FROM {table}") for table in TABLES}
        hashes = lake.con.execute("SELECT snapshot, content_hash, n_pairs FROM snapshots ORDER BY 1").fetchall()
    return {"counts": counts, "snapshots": hashes}


def _missing(lake_root: Path) -> list:
    with Lake(lake_root, read_only=True) as lake:
        return [f for f in catalog_files(lake.con, lake.data_path) if f.current and not f.path.is_file()]


def _run(recipe: Path, state: Path, *flags: str):
    return runner.invoke(app, ["run", str(recipe), "--state-dir", str(state), *flags])


def test_a_run_on_a_catalog_older_than_its_data_is_refused_and_the_mend_restores_every_row(tmp_path):
    state, lake_root = tmp_path / "state", tmp_path / "state" / "lake"
    catalog, backup = lake_root / "catalog.sqlite", tmp_path / "catalog-backup.sqlite"
    first = _run(_recipe(tmp_path, SENTENCES[:10]), state, "--no-prefect")
    assert first.exit_code == 0, first.output
    with closing(sqlite3.connect(catalog)) as src, closing(sqlite3.connect(backup)) as dst:
        src.backup(dst)  # the backup: the catalog alone
    later = _run(_recipe(tmp_path, SENTENCES), state, "--no-prefect")  # more sentences: new files, merged
    assert later.exit_code == 0, later.output
    expected = _state(lake_root)

    for journal in ("-wal", "-shm"):
        catalog.with_name(catalog.name + journal).unlink(missing_ok=True)
    shutil.copy(backup, catalog)  # restore only the catalog
    missing = _missing(lake_root)
    assert missing, "the later run deleted files the older catalog lists"
    files = lake_bytes(lake_root)
    for flags in (["--no-prefect"], []):  # refused before Prefect starts, too
        refused = _run(tmp_path / "restore.yaml", state, *flags)
        assert refused.exit_code == 2, (flags, refused.output)
        assert " ".join(refused.output.split()) == (
            f"error: the lake's catalog {catalog} lists files that are not there: the {missing[0].table} "
            f"{missing[0].kind} file {missing[0].location} (and {len(missing) - 1} more). The catalog is older than "
            "its data (a backup put back after a later run merged those files into newer ones and deleted them; the "
            "newer files still hold their rows). Mend it before running: `viewmill lake verify` lists the missing "
            "and the newer files, `viewmill lake repair` takes the newer files' rows back, then run this again "
            "(same --state-dir and --catalog)"
        )
        assert lake_bytes(lake_root) == files, "a refused run writes nothing"

    verify = runner.invoke(app, ["lake", "verify", "--state-dir", str(state)])
    assert verify.exit_code == 1 and "missing" in verify.output and "orphan" in verify.output, verify.output
    repair = runner.invoke(app, ["lake", "repair", "--state-dir", str(state)])
    assert repair.exit_code == 0, repair.output
    rerun = _run(tmp_path / "restore.yaml", state, "--no-prefect")
    assert rerun.exit_code == 0, rerun.output
    assert _state(lake_root) == expected
    assert runner.invoke(app, ["lake", "verify", "--state-dir", str(state)]).exit_code == 0
