"""Every command that writes a file at a user's path goes through one guard
(storage/output_paths.py): no path inside the lake, no symlink or hard link onto a lake file,
written atomically beside the target. The writing options come from the CLI's own option
list, so a new one that the table below does not cover fails the test."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner
from viewmill.pipelines.cli.app import app
from viewmill.storage.lake import Lake
from viewmill.storage.output_paths import OutputGuard, OutputRefused

from tests.lake_state import lake_state, paired_lake

runner = CliRunner()

# A parameter that may name a file or folder: typed as a path, named like one, or its help says it writes one.
PATH_NAME = re.compile(r"\b(out|output|dest|dir|directory|folder|file|path)\b")
WRITES = re.compile(r"\bwrites? (the|a|an|to|into)\b|\boutput (file|folder)\b|\bfolder for\b")

SUITE = "papers"
# The options that write at the user's path: the command's arguments, given the state directory
# S, the snapshot N and the output path P; and the name the output usually has.
WRITERS = {
    ("sql", "output"): (["sql", "SELECT 1 AS a", "--state-dir", "S", "--format", "csv", "-o", "P"], "out.csv"),
    ("lake export", "out"): (["lake", "export", "N", "P", "--format", "parquet", "--state-dir", "S"], "pairs.parquet"),
    ("lake export-table", "out"): (["lake", "export-table", "sentences", "P", "--state-dir", "S"], "rows.parquet"),
    ("views report", "out"): (["views", "report", "--out", "P", "--cosine-sample", "0", "--state-dir", "S"], "report"),
    ("eval", "out"): (
        ["eval", "embedded:all-MiniLM-L6-v2", "--suite", SUITE, "--out", "P", "--state-dir", "S"],
        "reports",
    ),
    ("data fetch", "data_dir"): (["data", "fetch", "stsb", "--data-dir", "P"], "data"),  # the lake of $VIEWMILL_HOME
}
# Path-like parameters that write nothing at a user's path, and why.
NOT_WRITERS = {
    "state_dir": "the state directory: the lake itself, written by design",
    "recipe": "read",
    "suite": "read",
    "query_file": "read",
    "wheels": "read",
    "prefect_file": "read",
    "max_rows": "a row count (its help mentions --output FILE)",
}
NOT_WRITERS_OF = {("data list", "data_dir"): "read: lists what is fetched"}


def _commands(command, prefix=()):
    subs = getattr(command, "commands", None)
    if subs is None:
        yield " ".join(prefix), command
        return
    for name in subs:
        yield from _commands(subs[name], (*prefix, name))


def pathlike_params() -> set[tuple[str, str]]:
    """(command, parameter) for every parameter of the CLI that may name a file or folder."""
    found = set()
    for name, command in _commands(typer.main.get_command(app)):
        for param in command.params:
            bare = getattr(param, "bare_type", None)  # typer's own parameters know their annotation
            typed_path = callable(bare) and "Path" in str(bare())
            names = " ".join([param.name or "", *param.opts]).replace("_", " ").replace("-", " ").lower()
            if typed_path or PATH_NAME.search(names) or WRITES.search((getattr(param, "help", None) or "").lower()):
                found.add((name, param.name))
    return found


def test_every_path_option_of_the_cli_is_classified():
    """A new option that may write a file must join WRITERS (and so the refusals below)."""
    found = pathlike_params()
    unclassified = {
        key for key in found if key not in WRITERS and key[1] not in NOT_WRITERS and key not in NOT_WRITERS_OF
    }
    assert unclassified == set(), f"add these to WRITERS (tested) or NOT_WRITERS (why not): {sorted(unclassified)}"
    assert set(WRITERS) <= found, "a WRITERS entry names an option the CLI no longer has"


@pytest.fixture(scope="module")
def state(tmp_path_factory):
    root = tmp_path_factory.mktemp("guard")
    snapshot = paired_lake(root / "lake")
    return root, snapshot


def lake_bytes(lake: Path) -> dict[str, str]:
    """The sha256 of every file under the lake folder (catalog, data, hash records)."""
    return {
        str(path.relative_to(lake)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(lake.rglob("*"))
        if path.is_file()
    }


def _one_line(result) -> str:
    return " ".join(result.output.split())


def _cases(lake: Path, folder: Path, name: str) -> list[tuple[str, Path, str]]:
    """(case, output path, the refusal's reason) for one writer's output name."""
    data_file = next((lake / "data").rglob("*.parquet"))
    folder.mkdir()
    symlink, hard = folder / name, folder / f"hard-{name}"
    symlink.symlink_to(lake / "catalog.sqlite")
    os.link(data_file, hard)
    inside = f"inside the lake ({lake.resolve()}), where it could overwrite the catalog or a data file; write it "
    inside += "outside the state directory's lake"
    linked = f"a hard link to the lake's file {data_file.resolve()} (one file, two names); remove the link or write "
    linked += "somewhere else"
    return [("in the data folder", lake / "data" / name, inside), ("symlink to the catalog", symlink, inside),
            ("hard link to a data file", hard, linked)]  # fmt: skip


@pytest.mark.parametrize("writer", sorted(WRITERS), ids=" ".join)
def test_no_writing_option_reaches_the_lake(state, tmp_path, writer):
    root, snapshot = state
    lake = root / "lake"
    template, name = WRITERS[writer]
    before, files = lake_state(lake), lake_bytes(lake)
    for case, path, reason in _cases(lake, tmp_path / "out", name):
        args = [{"S": str(root), "N": snapshot, "P": str(path)}.get(arg, arg) for arg in template]
        result = runner.invoke(app, args, env={"VIEWMILL_HOME": str(root), "COLUMNS": "1000"})
        assert result.exit_code == 2, (writer, case, result.output)
        assert _one_line(result) == f"error: refusing to write {path}: it is {reason}", (writer, case)
    assert lake_bytes(lake) == files and lake_state(lake) == before
    assert (tmp_path / "out" / name).is_symlink()


def test_views_report_never_writes_through_a_link_in_its_folder(state, tmp_path):
    """The reported case: report.md in --out is a symlink to the catalog. Refused before any work,
    and nothing is written in the folder (test_views_report.py writes a report through the guard)."""
    root, _ = state
    lake = root / "lake"
    out = tmp_path / "report"
    out.mkdir()
    (out / "report.md").symlink_to(lake / "catalog.sqlite")
    before, files = lake_state(lake), lake_bytes(lake)  # read first: opening the lake makes SQLite's -shm
    args = ["views", "report", "--out", str(out), "--cosine-sample", "0", "--state-dir", str(root)]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert _one_line(result) == (
        f"error: refusing to write {out / 'report.md'}: it is inside the lake ({lake.resolve()}), where it could "
        "overwrite the catalog or a data file; write it outside the state directory's lake"
    )
    assert lake_bytes(lake) == files and lake_state(lake) == before
    assert sorted(p.name for p in out.iterdir()) == ["report.md"]


def test_a_failed_write_leaves_the_old_file_and_no_partial_one(state, tmp_path):
    root, _ = state
    with Lake(root / "lake", read_only=True) as lake:
        guard = OutputGuard.of(lake)
    target = tmp_path / "result.csv"
    target.write_text("old\n")
    with pytest.raises(RuntimeError, match="disk full"), guard.atomic(target) as partial:
        partial.write_text("half")
        raise RuntimeError("disk full")
    assert target.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["result.csv"]
    guard.write_text(target, "new\n")
    assert target.read_text() == "new\n" and sorted(p.name for p in tmp_path.iterdir()) == ["result.csv"]


def test_a_link_name_is_replaced_never_written_through(state, tmp_path):
    """Outside the lake a symlinked or hard-linked output name is replaced by the new file; what
    it pointed to keeps its bytes."""
    root, _ = state
    with Lake(root / "lake", read_only=True) as lake:
        guard = OutputGuard.of(lake)
    elsewhere = tmp_path / "mine.txt"
    elsewhere.write_text("keep me\n")
    (tmp_path / "sym.txt").symlink_to(elsewhere)
    os.link(elsewhere, tmp_path / "hard.txt")
    for name in ("sym.txt", "hard.txt"):
        guard.write_text(tmp_path / name, "result\n")
        assert not (tmp_path / name).is_symlink() and (tmp_path / name).read_text() == "result\n"
    assert elsewhere.read_text() == "keep me\n"


def test_a_catalog_kept_elsewhere_and_a_folder_holding_the_lake(tmp_path):
    """The catalog outside the lake folder (sqlite:PATH): the file, its journal, a hard link to it;
    and a whole-folder output (an hf export) that would replace the folder holding the lake."""
    catalog = tmp_path / "catalogs" / "viewmill.sqlite"
    catalog.parent.mkdir()
    paired_lake_root = tmp_path / "state" / "lake"
    paired_lake_root.mkdir(parents=True)
    with Lake(paired_lake_root, catalog=f"sqlite:{catalog}") as lake:
        guard = OutputGuard.of(lake)
    os.link(catalog, tmp_path / "hard.sqlite")
    for path in (catalog, catalog.with_name("viewmill.sqlite-wal")):
        with pytest.raises(OutputRefused) as refused:
            guard.check(path)
        assert str(refused.value) == (
            f"refusing to write {path}: it is the lake's catalog {catalog} (or its journal); write it somewhere else"
        )
    with pytest.raises(OutputRefused, match=f"it is a hard link to the lake's file {re.escape(str(catalog))} "):
        guard.check(tmp_path / "hard.sqlite")
    with pytest.raises(OutputRefused) as refused:
        guard.check(tmp_path / "state", replaces_folder=True)
    assert str(refused.value) == (
        f"refusing to write {tmp_path / 'state'}: it holds the lake ({paired_lake_root.resolve()}), which replacing "
        "the folder would delete; name a new folder"
    )
    assert guard.check(tmp_path / "state" / "report.md") == tmp_path / "state" / "report.md"
