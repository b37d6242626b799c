"""The `viewmill lake` sub-app: `snapshots`, `runs`, `embeddings` and `export` here, `init`, `compact`, `verify`,
`repair` and `attach` from `lake_admin`. Loaded only when a lake command runs or help lists it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from viewmill.pipelines.cli import lake_admin
from viewmill.pipelines.cli.common import (
    HELP,
    CatalogOption,
    StateDir,
    console,
    err_console,
    fail,
    load_settings,
    open_lake_read_only,
)
from viewmill.pipelines.cli.output import print_table
from viewmill.pipelines.state import StatePaths

lake_app = typer.Typer(help="Inspect the lake.", no_args_is_help=True, context_settings=HELP)


@lake_app.command("snapshots")
def snapshots(state_dir: StateDir = None, catalog: CatalogOption = None) -> None:
    """List the named pairs snapshots."""
    with open_lake_read_only(state_dir, catalog) as lake:
        table = lake.arrow(
            "SELECT snapshot, recipe, corpus, n_pairs, lake_version, created_at, run_id "
            "FROM snapshots ORDER BY created_at"
        )
    print_table(table, console)


RUN_COLUMNS = ("run_id", "recipe", "status", "started_at", "finished_at", "flow", "flow_run_id", "deployment",
               "host", "pid", "error")  # fmt: skip


@lake_app.command("runs")
def runs(state_dir: StateDir = None, catalog: CatalogOption = None) -> None:
    """List the runs, newest first, with their Prefect flow runs; a run whose process is gone
    without recording its end (killed, the machine restarted) shows as crashed."""
    import pyarrow as pa
    from viewmill.pipelines.run_status import shown_status

    with open_lake_read_only(state_dir, catalog) as lake:
        table = lake.arrow("SELECT * FROM runs ORDER BY started_at DESC")
    table = table.select([name for name in RUN_COLUMNS if name in table.column_names])  # an older lake has fewer
    status = pa.array([shown_status(row) for row in table.to_pylist()], pa.string())
    print_table(table.set_column(table.column_names.index("status"), "status", status), console)


NO_EMBEDDINGS = (
    "the lake stores no embeddings: mined negatives keep them (pair.negatives: {source: mined}, "
    "store: true by default), and so does a meaning filter of the miner's encoder"
)


@lake_app.command("embeddings")
def embeddings(
    drop: Annotated[
        str | None, typer.Option("--drop", metavar="ENCODER", help="delete every embedding stored under this key")
    ] = None,
    state_dir: StateDir = None,
    catalog: CatalogOption = None,
) -> None:
    """List the embedding store's encoders (what mining and the meaning filter keep, docs/lake.md),
    or drop one's embeddings: they are embedded again when a run needs them."""
    from viewmill.storage.embeddings import drop_encoder, stored_encoders
    from viewmill.storage.lake import LakeError, open_lake

    with open_lake_read_only(state_dir, catalog) as lake:  # refuses a folder without a lake, never makes one
        if drop is None:
            stored = stored_encoders(lake)
            if stored.num_rows:
                print_table(stored, console)
            else:
                err_console.print(NO_EMBEDDINGS, highlight=False)
            return
    try:
        with open_lake(load_settings(catalog), StatePaths.resolve(state_dir).lake) as lake:
            dropped = drop_encoder(lake, drop)
    except LakeError as exc:
        fail(exc)
    err_console.print(f"dropped {dropped} embeddings stored under {drop}", highlight=False)


@lake_app.command("export")
def export(
    snapshot: Annotated[str, typer.Argument(help="snapshot name (see viewmill lake snapshots)")],
    out: Annotated[Path, typer.Argument(help="output file, .parquet or .jsonl (a folder for --format hf)")],
    fmt: Annotated[
        str | None,
        typer.Option("--format", help="parquet, jsonl, or hf: a Hugging Face datasets folder (default: the suffix)"),
    ] = None,
    layout: Annotated[
        str,
        typer.Option(
            help="viewmill: the lake's pair columns; sentence-transformers: anchor, positive, negative "
            "(or negative_1..negative_k), what its trainer takes"
        ),
    ] = "viewmill",
    state_dir: StateDir = None,
    catalog: CatalogOption = None,
) -> None:
    """Export a pairs snapshot (and its hard negatives) for other tools."""
    from viewmill.storage.snapshots import export_snapshot

    with open_lake_read_only(state_dir, catalog) as lake:
        n = export_snapshot(lake, snapshot, out, fmt, layout)
    err_console.print(f"wrote {n} pairs of {snapshot} to {out}", highlight=False)  # status, not a result


# init, compact, verify, repair, attach: making, tidying, checking and mending a lake
lake_admin.register(lake_app)
