"""A full disk while augmentation writes views (the whole state on a small real tmpfs): exit 1
naming the lake and `df -h`, the shard's write rolled back with its files, the shards committed
before kept, and a rerun that ends with the counts, snapshot and model of an uninterrupted run
(issue 30)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner
from viewmill.pipelines.cli.app import app
from viewmill.storage.lake import Lake

from tests.conftest import needs_apertium
from tests.lake_state import lake_state
from tests.tmpfs import fill, tmpfs

pytestmark = [needs_apertium, pytest.mark.slow]  # two runs (one trains) and the shared uninterrupted one
runner = CliRunner()


def _args(recipe, state) -> list[str]:
    return ["run", str(recipe), "--no-prefect", "--state-dir", str(state), "--set", "execution.chunk_sentences=6"]


def _run(recipe, state) -> tuple[int, str]:
    """In its own process: the trained model it evaluates is not left mapped from the disk."""
    done = subprocess.run([str(Path(sys.executable).with_name("viewmill")), *_args(recipe, state)],
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    return done.returncode, " ".join((done.stdout + done.stderr).split())


def test_a_full_disk_during_augment_exits_1_and_the_rerun_ends_as_an_uninterrupted_run(
    tmp_path, tiny_run_in_small_commits, monkeypatch, caplog
):
    tiny_recipe, reference, _ = tiny_run_in_small_commits  # the uninterrupted run, its arguments as _args's
    expected = lake_state(reference / "lake")

    with tmpfs(tmp_path / "disk", "size=32m") as disk:
        state, filler, lake = disk / "state", disk / "filler", disk / "state" / "lake"
        real_append, views_written = Lake.append, []

        def append_filling_the_disk_before_the_second_views_shard(self, table, rows, unique_on=()):
            if table == "views":
                views_written.append(1)
                if len(views_written) == 2:
                    fill(filler)
            return real_append(self, table, rows, unique_on)

        monkeypatch.setattr(Lake, "append", append_filling_the_disk_before_the_second_views_shard)
        result = runner.invoke(app, _args(tiny_recipe, state))  # here: the disk fills inside this process
        code, out = result.exit_code, " ".join(result.output.split())
        assert code == 1 and "Traceback" not in out, out
        assert (
            f"error: failed: no space left on device while writing the lake at {lake} (catalog {lake}/catalog.sqlite, "
            f"data {lake}/data): the write was rolled back and the lake keeps its last commit; free space there "
            "(df -h) or move the state directory to a larger disk"
        ) in out
        assert any("could not be recorded in `runs`: no space left" in m for m in caplog.messages)
        filler.unlink()
        partway = lake_state(lake)
        assert 0 < partway["counts"]["views"] < expected["counts"]["views"], "the first shard's views are kept"
        assert partway["counts"]["sentences"] == expected["counts"]["sentences"] and partway["snapshots"] == {}
        verify = runner.invoke(app, ["lake", "verify", "--state-dir", str(state)])
        assert verify.exit_code == 0 and "lake ok" in verify.output, "no half-written file: " + verify.output

        monkeypatch.setattr(Lake, "append", real_append)
        code, out = _run(tiny_recipe, state)
        assert code == 0, out
        after = lake_state(lake)
        assert after["counts"].pop("runs") == expected["counts"].pop("runs") + 1, "the failed run's row is kept"
        assert after["counts"] == expected["counts"], "the same counts"
        assert after["snapshots"] == expected["snapshots"], "the same snapshot name and content hash"
        with Lake(lake, read_only=True) as mine, Lake(reference / "lake", read_only=True) as theirs:
            query = "SELECT model_id FROM models"
            assert mine.con.execute(query).fetchall() == theirs.con.execute(query).fetchall(), "the same model id"
