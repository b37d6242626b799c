"""`viewmill lake init | compact | verify | repair | attach | export-table`: making, tidying,
checking and mending a lake, and opening it to other tools (your own DuckDB, one file per table).

Exit codes follow the CLI's convention: 0 ok, 1 the lake is damaged (or could not be
mended), 2 bad input (no lake there, a lake already there, a bad catalog setting).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer
from rich.console import Console
from viewmill.pipelines.state import StatePaths
from viewmill.storage.lake import Lake, LakeError

from viewmill.allocator import program_env

if TYPE_CHECKING:
    from viewmill.storage.integrity import VerifyReport
    from viewmill.storage.repair import RepairReport

console = Console(width=None if sys.stdout.isatty() else 240)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 240)
EXIT_OK, EXIT_DAMAGED, EXIT_USAGE = 0, 1, 2

StateDir = Annotated[
    Path | None, typer.Option("--state-dir", help="state directory (default $VIEWMILL_HOME or ./.viewmill)")
]
CatalogOption = Annotated[
    str | None, typer.Option("--catalog", help="lake catalog: sqlite (default), duckdb or postgres:'...'")
]


def _refuse(exc: Exception, code: int = EXIT_USAGE) -> NoReturn:
    err_console.print(f"[bold red]error:[/] {exc}", highlight=False)
    raise typer.Exit(code)


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
        lake = Lake(StatePaths.resolve(state_dir).lake, catalog=catalog)
    except LakeError as exc:
        _refuse(exc)
    with lake:
        try:
            report = compact_lake(lake, keep_days=keep_days)
        except LakeError as exc:  # a changed file it would merge: damage, for verify and repair
            _refuse(exc, EXIT_DAMAGED)
    console.print(
        f"data files: {report.files_before} -> {report.files_after} ({report.deleted_files} deleted); "
        f"expired {len(report.expired_snapshots)} snapshot(s); pinned lake versions kept: "
        f"{', '.join(map(str, report.pinned)) or 'none'}",
        highlight=False,
    )


def verify(
    state_dir: StateDir = None,
    catalog: CatalogOption = None,
    quick: Annotated[
        bool, typer.Option("--quick", help="check sizes and Parquet footers only; do not hash file contents")
    ] = False,
    record_hashes: Annotated[
        bool,
        typer.Option(
            "--record-hashes",
            help="trust the current content of files that have no recorded hash (made by an older viewmill)",
        ),
    ] = False,
) -> None:
    """Check the catalog against the files and the pairs snapshots against their hashes.

    Reports missing, unreadable, resized or re-counted files, files whose content changed since
    viewmill wrote them (sha256; skipped with --quick), files with no recorded hash, orphaned
    files, and named snapshots whose pairs no longer match their hash; exits 1 when the lake is
    damaged. --record-hashes records today's content of files that have no hash as trusted."""
    from viewmill.storage.integrity import record_missing_hashes, verify_lake

    root = StatePaths.resolve(state_dir).lake
    recorded = []
    try:
        with Lake(root, read_only=not record_hashes, catalog=catalog) as lake:
            if record_hashes:
                recorded, report = record_missing_hashes(lake)
            else:
                report = verify_lake(lake, quick=quick)
    except LakeError as exc:
        _refuse(exc)
    for problem in report.problems:
        console.print(problem.line(), highlight=False, markup=False, soft_wrap=True)  # one line per file
    for name in report.legacy_snapshots:
        console.print(f"note: snapshot {name} has an ids-only hash (made before texts were hashed)", highlight=False)
    if report.foreign_records:
        console.print(
            f"note: {report.foreign_records} recorded file hash(es) are not signed by this lake's key "
            "(copied from another lake?) and were ignored",
            highlight=False,
        )
    if recorded:
        console.print(f"recorded the content hash of {len(recorded)} file(s): their current content is trusted")
    _verdict(root, report)


def _verdict(root: Path, report: VerifyReport) -> None:
    if report.ok:
        warnings = f", {len(report.problems)} warning(s)" if report.problems else ""
        how = "sizes and footers only (--quick): contents not hashed" if report.quick else "contents hashed"
        console.print(f"lake ok: {report.files} catalog files checked, {how}{warnings}", highlight=False)
        return
    kinds = {p.kind for p in report.errors}
    fixes = []
    if kinds - {"unhashed"}:
        fixes.append(
            "run `viewmill lake repair` (it keeps every intact row and moves orphaned files aside), or restore a backup"
        )
    if "unhashed" in kinds:
        fixes.append(
            "files without a recorded hash were written by an older viewmill (or outside viewmill): check them, then "
            "`viewmill lake verify --record-hashes` trusts their current content"
        )
    err_console.print(
        f"[bold red]lake damaged:[/] {len(report.errors)} problem(s) in {root}: {'; '.join(fixes)}", highlight=False
    )
    raise typer.Exit(EXIT_DAMAGED)


def repair(state_dir: StateDir = None, catalog: CatalogOption = None) -> None:
    """Mend a damaged lake, keeping every intact row; then rerun the recipe.

    Tables lose only the rows of missing, damaged or changed files; rows of orphaned files are
    taken back only when this lake's signed hash record says viewmill wrote them (any other
    file is moved aside and reported); damaged pairs snapshots are dropped so the next run
    makes them again. Holds the writer lock throughout: a second repair waits for the first."""
    from viewmill.storage.repair import repair_lake

    state = StatePaths.resolve(state_dir)

    def waiting() -> None:
        err_console.print(
            f"another process is writing the lake at {state.lake} (a run or a repair): waiting for it to finish",
            highlight=False,
        )

    try:
        lake = Lake(state.lake, catalog=catalog)
    except LakeError as exc:
        _refuse(exc)
    with lake:
        try:
            report = repair_lake(lake, state.root, on_wait=waiting)
        except LakeError as exc:  # refused before changing anything, or a write that failed
            _refuse(exc, EXIT_DAMAGED)
    _print_repair(report)
    after = report.after
    if after is not None and not after.ok:
        for problem in after.errors:
            err_console.print(problem.line(), highlight=False, markup=False, soft_wrap=True)  # one line per file
        if {p.kind for p in after.errors} == {"unhashed"}:
            err_console.print(
                "[bold red]error:[/] these files have no recorded content hash (written by an older viewmill, or "
                "outside viewmill): check them, then `viewmill lake verify --record-hashes` trusts their content",
                highlight=False,
            )
        else:
            err_console.print("[bold red]error:[/] the lake still has problems: restore a backup", highlight=False)
        raise typer.Exit(EXIT_DAMAGED)
    console.print("lake consistent; rerun the recipe to regenerate anything lost", highlight=False)


def _print_repair(report: RepairReport) -> None:
    for table, rows in report.rebuilt.items():
        console.print(f"rebuilt {table} from its intact files: {rows} row(s) kept", highlight=False)
    for path in report.lost_files:
        console.print(f"lost file: {path}", highlight=False, markup=False, soft_wrap=True)  # one line per file
    for table, rows in report.recovered.items():
        console.print(f"took back {rows} row(s) of {table} from orphaned files", highlight=False)
    for path, why in report.not_taken_back:
        console.print(
            f"not taken back: {path}: {why}", highlight=False, markup=False, soft_wrap=True
        )  # one line per file
    if report.moved_to:
        console.print(f"orphaned files moved to {report.moved_to}", highlight=False)
    for name in report.dropped_snapshots:
        console.print(f"dropped damaged snapshot {name}: rerun its recipe to make it again", highlight=False)


OpenShell = Annotated[
    bool, typer.Option("--open", help="open the DuckDB shell (`duckdb` on PATH) with the lake attached")
]
ReadWrite = Annotated[
    bool, typer.Option("--read-write", help="attach writable: bypasses viewmill's writer lock (see the warning)")
]
DuckdbVersion = Annotated[
    str | None, typer.Option(help="the DuckDB that will run the SQL (default: `duckdb` on PATH, else viewmill's own)")
]


def attach(
    state_dir: StateDir = None,
    catalog: CatalogOption = None,
    open_shell: OpenShell = False,
    read_write: ReadWrite = False,
    duckdb_version: DuckdbVersion = None,
) -> None:
    """Print the SQL that opens the lake in your own DuckDB, or (--open) open a DuckDB shell on it.

    The SQL loads the ducklake extension and the catalog's (sqlite, postgres; httpfs for s3://),
    by path from viewmill's environment when your DuckDB is viewmill's version, else with
    INSTALL/LOAD; then ATTACHes the lake READ_ONLY with its data path, and USEs it. Start your
    shell with it (`viewmill lake attach > lake.sql; duckdb -init lake.sql`), or run it in Python
    (`duckdb.connect().execute(sql)`). The lake's catalog (DuckLake format 1.0) opens in DuckDB
    1.5.2 or newer; 1.5.1 and older refuse it. No password or S3 key is printed (placeholders
    say where they go). --read-write prints a writable ATTACH and a warning: writes outside viewmill
    bypass its writer lock and leave files without recorded hashes, which pairing refuses until
    `viewmill lake verify --record-hashes`."""
    from viewmill.storage.attach import READ_WRITE_WARNING, attach_sql, locate, secret_statements

    binary = shutil.which("duckdb")
    if open_shell and binary is None:
        _refuse(_no_shell())
    try:
        version = _binary_version(binary) if binary and (open_shell or duckdb_version is None) else None
        version = version or duckdb_version or _duckdb_module_version()
        root = StatePaths.resolve(state_dir).lake
        with Lake(root, read_only=True, catalog=catalog) as lake:
            where = locate(lake)
        sql = attach_sql(where, duckdb_version=version, read_write=read_write)
    except LakeError as exc:
        _refuse(exc)
    if read_write:
        err_console.print(READ_WRITE_WARNING, highlight=False, markup=False)
    if not open_shell:
        sys.stdout.write(sql)  # plain text: no wrapping or markup, so it pipes into duckdb as it is
        return
    private = attach_sql(where, duckdb_version=version, read_write=read_write, secrets=secret_statements(where))
    raise typer.Exit(_run_shell(str(binary), private))


def _no_shell() -> LakeError:
    return LakeError(
        "--open needs the DuckDB command-line shell and there is no `duckdb` on PATH (the Python duckdb "
        f"module has no interactive shell): pip install duckdb-cli=={_duckdb_module_version()} (the version "
        "viewmill's extensions load in, offline), or print the SQL with `viewmill lake attach` and run it in "
        "your own DuckDB, or query with `viewmill sql`"
    )


def export_table(
    table: Annotated[str, typer.Argument(help="a lake table, e.g. views, translations, evals")],
    out: Annotated[Path, typer.Argument(help="output file, .parquet or .jsonl (outside the lake)")],
    fmt: Annotated[str | None, typer.Option("--format", help="parquet or jsonl (default: from the suffix)")] = None,
    state_dir: StateDir = None,
    catalog: CatalogOption = None,
) -> None:
    """Write one table's current rows to a single Parquet or JSONL file for other tools.

    Deletes are applied and every file merged: use it where the data folder's raw Parquet
    would be wrong, i.e. for tables with deletes (evals) or whenever a tool cannot attach a
    DuckLake. For pairs snapshots, `viewmill lake export SNAPSHOT` is the same for one snapshot."""
    from viewmill.storage.attach import export_table as write_table

    try:
        with Lake(StatePaths.resolve(state_dir).lake, read_only=True, catalog=catalog) as lake:
            n = write_table(lake, table, out, fmt)
    except LakeError as exc:
        _refuse(exc)
    err_console.print(f"wrote {n} row(s) of {table} to {out}", highlight=False)  # status, not a result


def _duckdb_module_version() -> str:
    import duckdb

    return duckdb.__version__


def _binary_version(binary: str) -> str:
    try:
        done = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=60, check=True, env=program_env()
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise LakeError(f"cannot run `{binary} --version` ({exc}): check that {binary} is a DuckDB shell") from None
    return done.stdout.strip()


def _run_shell(binary: str, sql: str) -> int:
    """The DuckDB shell with the lake attached: the SQL (secrets included, never printed) goes
    in an init file only this user can read, removed when the shell exits."""
    with tempfile.TemporaryDirectory(prefix="viewmill-attach-") as folder:  # mode 0700
        init = Path(folder) / "attach.sql"
        fd = os.open(init, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(sql)
        return subprocess.run([binary, "-init", str(init)], check=False, env=program_env()).returncode


def register(lake_app: typer.Typer) -> None:
    for command in (init, compact, verify, repair, attach, export_table):
        lake_app.command(command.__name__.replace("_", "-"))(command)
