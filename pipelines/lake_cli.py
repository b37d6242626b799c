"""`viewmill lake init | compact | verify | repair`: making, tidying, checking and mending a lake.

Exit codes follow the CLI's convention: 0 ok, 1 the lake is damaged (or could not be
mended), 2 bad input (no lake there, a lake already there, a bad catalog setting).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from viewmill.pipelines.state import StatePaths
from viewmill.storage.lake import Lake, LakeError

console = Console(width=None if sys.stdout.isatty() else 240)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 240)
EXIT_OK, EXIT_DAMAGED, EXIT_USAGE = 0, 1, 2

StateDir = Annotated[
    Path | None, typer.Option("--state-dir", help="state directory (default $VIEWMILL_HOME or ./.viewmill)")
]
CatalogOption = Annotated[
    str | None, typer.Option("--catalog", help="lake catalog: sqlite (default), duckdb or postgres:'...'")
]


def _refuse(exc: Exception) -> None:
    err_console.print(f"[bold red]error:[/] {exc}", highlight=False)
    raise typer.Exit(EXIT_USAGE)


def init(state_dir: StateDir = None, catalog: CatalogOption = None) -> None:
    """Make a new, empty lake; data left without its catalog is moved aside, never deleted."""
    from viewmill.storage.maintenance import init_lake

    root = StatePaths.resolve(state_dir).lake
    try:
        moved = init_lake(root, catalog=catalog)
    except LakeError as exc:
        _refuse(exc)
    if moved is not None:
        console.print(f"moved the data that had no catalog to {moved}", highlight=False)
    console.print(f"new lake at {root}", highlight=False)


def compact(
    state_dir: StateDir = None,
    catalog: CatalogOption = None,
    keep_days: Annotated[
        float, typer.Option(help="keep DuckLake snapshots (time travel) this many days; pinned ones always")
    ] = 7.0,
) -> None:
    """Merge small files, expire old snapshots (never pinned ones), delete unreferenced files.

    Afterwards the data folder holds each current row exactly once. A DuckLake snapshot that a
    named pairs snapshot (and so a model trained on it) records is never expired."""
    from viewmill.storage.maintenance import compact_lake

    try:
        with Lake(StatePaths.resolve(state_dir).lake, catalog=catalog) as lake:
            report = compact_lake(lake, keep_days=keep_days)
    except LakeError as exc:
        _refuse(exc)
    console.print(
        f"data files: {report.files_before} -> {report.files_after} ({report.deleted_files} deleted); "
        f"expired {len(report.expired_snapshots)} snapshot(s); pinned lake versions kept: "
        f"{', '.join(map(str, report.pinned)) or 'none'}",
        highlight=False,
    )


def verify(state_dir: StateDir = None, catalog: CatalogOption = None) -> None:
    """Check the catalog against the files and the pairs snapshots against their hashes.

    Reports missing, unreadable, resized or re-counted files, orphaned files, and named
    snapshots whose pairs no longer match their hash; exits 1 when the lake is damaged."""
    from viewmill.storage.integrity import verify_lake

    root = StatePaths.resolve(state_dir).lake
    try:
        with Lake(root, read_only=True, catalog=catalog) as lake:
            report = verify_lake(lake)
    except LakeError as exc:
        _refuse(exc)
    for problem in report.problems:
        console.print(problem.line(), highlight=False, markup=False)
    for name in report.legacy_snapshots:
        console.print(f"note: snapshot {name} has an ids-only hash (made before texts were hashed)", highlight=False)
    if report.ok:
        warnings = f", {len(report.problems)} warning(s)" if report.problems else ""
        console.print(f"lake ok: {report.files} catalog files checked{warnings}", highlight=False)
        return
    err_console.print(
        f"[bold red]lake damaged:[/] {len(report.errors)} problem(s) in {root}: run `viewmill lake repair` "
        "(it keeps every intact row and moves orphaned files aside), or restore a backup",
        highlight=False,
    )
    raise typer.Exit(EXIT_DAMAGED)


def repair(state_dir: StateDir = None, catalog: CatalogOption = None) -> None:
    """Mend a damaged lake, keeping every intact row; then rerun the recipe.

    Tables lose only the rows of missing or damaged files, rows of orphaned files are taken
    back, damaged pairs snapshots are dropped so the next run makes them again."""
    from viewmill.storage.integrity import repair_lake

    state = StatePaths.resolve(state_dir)
    try:
        with Lake(state.lake, catalog=catalog) as lake:
            report = repair_lake(lake, state.root)
    except LakeError as exc:
        _refuse(exc)
    for table, rows in report.rebuilt.items():
        console.print(f"rebuilt {table} from its intact files: {rows} row(s) kept", highlight=False)
    for path in report.lost_files:
        console.print(f"lost file: {path}", highlight=False, markup=False)
    for table, rows in report.recovered.items():
        console.print(f"took back {rows} row(s) of {table} from orphaned files", highlight=False)
    if report.moved_to:
        console.print(f"orphaned files moved to {report.moved_to}", highlight=False)
    for name in report.dropped_snapshots:
        console.print(f"dropped damaged snapshot {name}: rerun its recipe to make it again", highlight=False)
    after = report.after
    if after is not None and not after.ok:
        for problem in after.errors:
            err_console.print(problem.line(), highlight=False, markup=False)
        err_console.print("[bold red]error:[/] the lake still has problems: restore a backup", highlight=False)
        raise typer.Exit(EXIT_DAMAGED)
    console.print("lake consistent; rerun the recipe to regenerate anything lost", highlight=False)


def register(lake_app: typer.Typer) -> None:
    for command in (init, compact, verify, repair):
        lake_app.command(command.__name__)(command)
