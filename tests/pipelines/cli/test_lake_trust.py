"""`viewmill lake verify` and `lake repair` trust only what viewmill wrote: same-size changes
inside a file, stray and foreign files, lakes made before hashes were recorded, and repairs
that run at once or are killed part-way (real DuckLake lakes, the CLI, real processes)."""

import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner
from viewmill.pipelines.cli.app import app
from viewmill.storage.file_hashes import RECORD_DIR
from viewmill.storage.integrity import verify_lake
from viewmill.storage.lake import Lake, LakeError
from viewmill.storage.lake_files import catalog_files
from viewmill.storage.schema import VIEWS
from viewmill.storage.snapshots import PAIRING_READS

from tests.lake_state import change_in_place, lake_state, pair_views, paired_lake

runner = CliRunner()
NO_RECORD = "no record that viewmill wrote it into this lake (not in the lake's signed hash record)"


@pytest.fixture(scope="module")
def built_state(tmp_path_factory) -> Path:
    """A state directory holding a `paired_lake`, made once: tests change copies of it."""
    state = tmp_path_factory.mktemp("lake-trust") / "state"
    paired_lake(state / "lake")
    return state


@pytest.fixture
def state(tmp_path, built_state) -> Path:
    """A copy of `built_state` (with its lake's own key)."""
    shutil.copytree(built_state, tmp_path / "state")
    return tmp_path / "state"


def _lake(args: list[str], state: Path):
    return runner.invoke(app, ["lake", *args, "--state-dir", str(state)])


def _holding(lake_root: Path, table: str, text: bytes) -> str:
    with Lake(lake_root, read_only=True) as lake:
        files = [f.location for f in catalog_files(lake.con, lake.data_path, tables=(table,)) if f.kind == "data"]
    (found,) = [f for f in files if text in Path(f).read_bytes()]
    return found


def _n_files(lake_root: Path) -> int:
    with Lake(lake_root, read_only=True) as lake:
        return len(catalog_files(lake.con, lake.data_path))


def _view(view_id: str, text: str, augmenter: str = "C") -> pa.Table:
    row = {"view_id": view_id, "sentence_id": "s0", "augmenter": augmenter, "config_hash": f"h{augmenter}",
           "text": text, "lang": "en", "status": "kept"}  # fmt: skip
    return pa.Table.from_pylist([row], schema=VIEWS)


@pytest.mark.parametrize(
    ("table", "old", "new", "snapshot_changed"),
    [
        ("views", b"view A of s0", b"VIEW A of s0", False),
        ("sentences", b"text s0", b"TEXT s0", False),
        ("pairs", None, None, True),  # a text the pairs' data holds: the snapshot's content hash sees it too
    ],
    ids=["views", "sentences", "pairs"],
)
def test_full_verify_finds_a_same_size_change_that_quick_verify_cannot(state, table, old, new, snapshot_changed):
    lake_root = state / "lake"
    if old is None:
        # The first pair's text: stored as written at the start of its compressed page, where a
        # later row's text may be stored only as a back-reference (and its bytes found only in
        # the page's min/max statistics, which the hash does not read).
        with Lake(lake_root, read_only=True) as lake:
            first = lake.con.execute("SELECT text_a FROM pairs ORDER BY pair_id LIMIT 1").fetchone()[0]
        old, new = first.encode(), first.upper().encode()
    changed, files = _holding(lake_root, table, old), _n_files(lake_root)
    before = lake_state(lake_root)
    change_in_place(changed, old, new)
    if snapshot_changed:
        assert new.decode() in pq.read_table(changed, columns=["text_a"])["text_a"].to_pylist(), "the data changed"

    quick = _lake(["verify", "--quick"], state)
    assert quick.exit_code == int(snapshot_changed), quick.output
    assert changed not in quick.output, "sizes and footers are unchanged"
    if not snapshot_changed:
        ok = f"lake ok: {files} catalog files checked, sizes and footers only (--quick): contents not hashed"
        assert ok in quick.output
    full = _lake(["verify"], state)
    assert full.exit_code == 1, full.output
    assert f"content    {table:<16} {changed}: sha256 " in full.output
    assert "recorded when viewmill wrote it" in full.output
    problems = 2 if snapshot_changed else 1
    message = " ".join(full.output.split())
    assert f"lake damaged: {problems} problem(s) in {lake_root}: run `viewmill lake repair`" in message
    assert "Traceback" not in full.output
    assert lake_state(lake_root) == before, "verify writes nothing"


def test_repair_sets_a_changed_views_file_aside_and_keeps_every_intact_row(state):
    lake_root = state / "lake"
    changed = _holding(lake_root, "views", b"view A of s0")
    before = lake_state(lake_root)
    lost_rows = pq.read_metadata(changed).num_rows
    change_in_place(changed, b"view A of s0", b"VIEW A of s0")

    repaired = _lake(["repair"], state)
    assert repaired.exit_code == 0, repaired.output
    kept = before["counts"]["views"] - lost_rows
    assert f"rebuilt views from its intact files: {kept} row(s) kept" in repaired.output
    assert f"lost file: {changed}" in repaired.output and "lake consistent" in repaired.output
    after = lake_state(lake_root)
    assert after["counts"] == {**before["counts"], "views": kept} and after["snapshots"] == before["snapshots"]
    with Lake(lake_root, read_only=True) as lake:
        assert lake.scalar("SELECT count(*) FROM views WHERE text LIKE 'VIEW%'") == 0, "no changed text is served"
    assert _lake(["verify"], state).exit_code == 0


def _restore_older_catalog(lake_root: Path, tmp_path: Path, newer: list[pa.Table]) -> list[str]:
    """Back the catalog up, commit `newer` (one file each), put the backup back: returns the
    newer files, now orphans that this lake's viewmill wrote."""
    backup = tmp_path / "catalog-backup.sqlite"
    shutil.copy(lake_root / "catalog.sqlite", backup)
    with Lake(lake_root) as lake:
        known = {f.location for f in catalog_files(lake.con, lake.data_path)}
        for rows in newer:
            lake.append("views", rows)
        files = [f.location for f in catalog_files(lake.con, lake.data_path) if f.location not in known]
    for wal in lake_root.glob("catalog.sqlite-*"):
        wal.unlink()
    shutil.copy(backup, lake_root / "catalog.sqlite")
    return files


def test_repair_takes_back_only_files_viewmill_wrote_and_moves_the_rest_aside(state, tmp_path):
    lake_root = state / "lake"
    intact, tampered = _restore_older_catalog(lake_root, tmp_path, [_view("C-s0", "c zero"), _view("C-s1", "c one")])
    change_in_place(tampered, b"c one", b"C ONE")
    stray = lake_root / "data" / "main" / "views" / "augmenter=D" / "ducklake-stray.parquet"
    stray.parent.mkdir(parents=True)
    pq.write_table(_view("D-s0", "dropped in", "D"), stray)  # valid Parquet, the right columns
    before = lake_state(lake_root)

    verified = _lake(["verify"], state)
    assert verified.exit_code == 1 and verified.output.count("orphan     views ") == 3, verified.output
    repaired = _lake(["repair"], state)
    assert repaired.exit_code == 0, repaired.output
    assert "took back 1 row(s) of views from orphaned files" in repaired.output
    assert f"not taken back: {tampered}: its content differs from what viewmill wrote there" in repaired.output
    assert f"not taken back: {stray}: {NO_RECORD}" in repaired.output
    after = lake_state(lake_root)
    assert after["counts"] == {**before["counts"], "views": before["counts"]["views"] + 1}
    assert after["snapshots"] == before["snapshots"]
    with Lake(lake_root, read_only=True) as lake:
        taken = lake.arrow("SELECT view_id, text FROM views WHERE augmenter IN ('C', 'D')").to_pylist()
    assert taken == [{"view_id": "C-s0", "text": "c zero"}]
    moved = [p.name for p in state.glob("orphaned-*/**/*.parquet")]
    assert sorted(moved) == sorted(Path(p).name for p in (intact, tampered, stray)), "moved aside, none deleted"
    assert _lake(["verify"], state).exit_code == 0


def _make_older(lake_root: Path) -> None:
    """What a lake made before viewmill recorded hashes looks like: no record, no key."""
    shutil.rmtree(lake_root / "data" / RECORD_DIR.split("/")[0])
    (lake_root / "lake.key").unlink()
    with sqlite3.connect(lake_root / "catalog.sqlite") as catalog:
        catalog.execute("DROP TABLE viewmill_lake_key_id")


def test_an_older_lake_without_hashes_is_reported_and_trusted_only_on_request(state):
    lake_root = state / "lake"
    _make_older(lake_root)
    files, before = _n_files(lake_root), lake_state(lake_root)
    for args in (["verify"], ["verify", "--quick"]):
        old = _lake(args, state)
        assert old.exit_code == 1, old.output
        assert old.output.count("unhashed   ") == files
        assert "no recorded content hash (written by an older viewmill, or outside viewmill)" in old.output
        message = " ".join(old.output.split())
        assert "then `viewmill lake verify --record-hashes` trusts their current content" in message
    with Lake(lake_root) as lake, pytest.raises(LakeError) as refused:
        pair_views(lake, lake.scalar("SELECT corpus_version FROM corpus_versions"))
    with Lake(lake_root, read_only=True) as lake:
        read = sorted(f.location for f in catalog_files(lake.con, lake.data_path, tables=PAIRING_READS) if f.current)
    assert str(refused.value) == (
        f"cannot pair the views of corpus 'c': the corpus_members data file {read[0]} (and {len(read) - 1} more "
        "file(s)) has no recorded content hash (written by an older viewmill, or outside viewmill), so its rows "
        "cannot be trusted: check the lake with `viewmill lake verify`, then trust today's content with "
        "`viewmill lake verify --record-hashes`, and rerun"
    )

    trusted = _lake(["verify", "--record-hashes"], state)
    assert trusted.exit_code == 0, trusted.output
    assert f"recorded the content hash of {files} file(s): their current content is trusted" in trusted.output
    assert _lake(["verify"], state).exit_code == 0
    with Lake(lake_root) as lake:
        again = pair_views(lake, lake.scalar("SELECT corpus_version FROM corpus_versions"))
    assert not again.created and again.name in before["snapshots"]
    assert lake_state(lake_root) == before


def test_repair_refuses_to_rebuild_a_table_from_files_nobody_recorded(state):
    lake_root = state / "lake"
    _make_older(lake_root)
    lost = _holding(lake_root, "views", b"view A of s0")
    Path(lost).unlink()
    before = lake_state(lake_root)
    refused = _lake(["repair"], state)
    assert refused.exit_code == 1, refused.output
    message = " ".join(refused.output.split())
    assert "cannot repair views: it must be rebuilt from its intact files, but 5 of them" in message
    assert "have no recorded content hash" in message and "(nothing was changed)" in message
    assert "Traceback" not in refused.output
    assert lake_state(lake_root) == before


def _damaged_and_restored(state: Path, tmp_path: Path) -> dict:
    """A lost views file (repair rebuilds views) and an older catalog restored (repair takes a
    newer view back): returns the counts and snapshots a correct repair leaves."""
    lake_root = state / "lake"
    _restore_older_catalog(lake_root, tmp_path, [_view("C-s0", "c zero")])
    lost = _holding(lake_root, "views", b"view A of s0")
    lost_rows = pq.read_metadata(lost).num_rows
    Path(lost).unlink()
    before = lake_state(lake_root)
    return {"counts": {**before["counts"], "views": before["counts"]["views"] - lost_rows + 1},
            "snapshots": before["snapshots"]}  # fmt: skip


def _expect_repaired(state: Path, expected: dict) -> None:
    after = lake_state(state / "lake")
    assert {"counts": after["counts"], "snapshots": after["snapshots"]} == expected
    with Lake(state / "lake", read_only=True) as lake:
        assert verify_lake(lake).ok
        assert lake.scalar("SELECT count(*) FROM views WHERE view_id = 'C-s0'") == 1
    assert len(list(state.glob("orphaned-*/**/*.parquet"))) == 1, "the orphan is moved once, not lost"


REPAIR = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from viewmill.pipelines.cli.app import app
    state, go = sys.argv[1], Path(sys.argv[2])
    print("ready", flush=True)
    while not go.exists():
        time.sleep(0.002)
    app(["lake", "repair", "--state-dir", state])
""")


@pytest.mark.parametrize("trial", range(5))
def test_two_repairs_at_once_take_turns_and_lose_nothing(state, tmp_path, trial):
    expected = _damaged_and_restored(state, tmp_path)
    go = tmp_path / "go"
    workers = [
        subprocess.Popen([sys.executable, "-c", REPAIR, str(state), str(go)], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
        for _ in range(2)
    ]  # fmt: skip
    for worker in workers:
        assert worker.stdout.readline().strip() == "ready"
    go.touch()
    outputs = [worker.communicate(timeout=240)[0] for worker in workers]
    assert [worker.returncode for worker in workers] == [0, 0], outputs
    joined = "\n".join(outputs)
    assert "Traceback" not in joined
    assert joined.count("took back 1 row(s) of views from orphaned files") == 1, outputs
    assert joined.count("rebuilt views from its intact files") == 1, outputs
    assert joined.count("lake consistent") == 2
    _expect_repaired(state, expected)


@pytest.mark.parametrize("point", ["repair-rebuilt", "repair-took-back"])
def test_a_repair_killed_part_way_is_finished_by_the_next_one(state, tmp_path, point):
    expected = _damaged_and_restored(state, tmp_path)
    env = {**os.environ, "VIEWMILL_TEST_CRASH_AT": point}
    killed = subprocess.run(
        [sys.executable, "-c", REPAIR, str(state), str(tmp_path)], env=env, capture_output=True, text=True
    )
    assert killed.returncode == -9, killed.stdout + killed.stderr
    with Lake(state / "lake", read_only=True) as lake:
        assert not verify_lake(lake).ok, "the killed repair left work to do"
    finished = _lake(["repair"], state)
    assert finished.exit_code == 0 and "lake consistent" in finished.output, finished.output
    _expect_repaired(state, expected)


def test_a_missing_key_file_is_named_with_the_fix_and_either_fix_works(state, tmp_path):
    """Issue 30: the key that signs the records is a file of the state folder. Without it, verify
    says so (exit 2, not "ok" and not every file "unhashed"), writers are refused before writing;
    putting the file back, or (lost for good) trusting today's files under a new key, both mend it."""
    lake_root, key = state / "lake", state / "lake" / "lake.key"
    saved, before = key.read_bytes(), lake_state(lake_root)
    key.unlink()
    records = lake_root / "data" / RECORD_DIR
    missing = (
        f"error: the lake's file-hash records are signed, but its signing key {key} is missing: restore that file "
        "from a backup of the state directory, or copy it from the state directory of a machine that writes this "
        f"lake (lake/lake.key); if it is lost for good, move {records} aside and run `viewmill lake verify "
        "--record-hashes`, which trusts the files as they are now under a new key"
    )
    for args in (["verify"], ["verify", "--quick"], ["verify", "--record-hashes"], ["repair"]):
        result = _lake(args, state)
        assert (result.exit_code, " ".join(result.output.split())) == (2, missing), args
    with pytest.raises(LakeError, match="its signing key .* is missing"):
        Lake(lake_root)
    assert not key.exists() and lake_state(lake_root) == before, "no new key, nothing written"

    key.write_bytes(saved)  # the fix: the file put back
    assert _lake(["verify"], state).exit_code == 0

    key.unlink()  # lost for good: the records set aside, today's files trusted under a new key
    records.rename(tmp_path / "file-hashes.aside")
    trusted = _lake(["verify", "--record-hashes"], state)
    assert trusted.exit_code == 0 and f"recorded the content hash of {_n_files(lake_root)} file(s)" in trusted.output
    assert key.read_bytes() != saved and _lake(["verify"], state).exit_code == 0
    assert lake_state(lake_root) == before


def test_another_lakes_key_file_is_refused_by_name(state, tmp_path):
    other = tmp_path / "other" / "lake"
    paired_lake(other)
    (state / "lake" / "lake.key").write_bytes((other / "lake.key").read_bytes())
    result = _lake(["verify"], state)
    assert result.exit_code == 2
    assert " ".join(result.output.split()) == (
        f"error: the signing key {state / 'lake' / 'lake.key'} is not the key this lake's catalog names (a key file "
        "from another lake?): put this lake's own lake.key there, from a backup of its state directory or from a "
        "machine that writes it"
    )


def test_a_copied_state_directory_carries_its_key_and_verifies(state, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(state, copy)
    assert (copy / "lake" / "lake.key").read_bytes() == (state / "lake" / "lake.key").read_bytes()
    assert oct((copy / "lake" / "lake.key").stat().st_mode & 0o777) == "0o600"
    result = _lake(["verify"], copy)
    assert result.exit_code == 0 and "lake ok:" in result.output, result.output
