"""`viewmill views report`: which augmenters give views that help (see viewmill.augment.views_report)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from viewmill.pipelines.cli.common import HELP, CatalogOption, StateDir, console, err_console, load_settings
from viewmill.pipelines.progress import progress_bar
from viewmill.pipelines.state import StatePaths

if TYPE_CHECKING:
    from viewmill.augment.views_report import AugmenterReport, Encode

views_app = typer.Typer(help="Inspect the augmented views.", no_args_is_help=True, context_settings=HELP)


def _encoder(ref: str) -> Encode:
    """Texts -> embeddings under `ref` (the recipes' start encoder by default). The model loads
    on the first call, inside the report's progress, not before it."""
    from viewmill.train.encoder import load_sentence_model, resolve_encoder

    path = resolve_encoder(ref)  # a bad reference fails now, before the lake is read
    loaded = []

    def encode(texts: list[str]):
        if not loaded:
            loaded.append(load_sentence_model(path))
        return loaded[0].encode(texts, batch_size=128, convert_to_numpy=True, show_progress_bar=False)

    return encode


def _print_augmenter(r: AugmenterReport) -> None:
    """One augmenter's counts and reasons, and the meaning filter's cosines drawn against its
    floor and ceiling (rejected bins in red)."""
    from rich.text import Text
    from viewmill.augment.meaning_report import summary_line, text_histogram

    err_console.print(
        f"{r.augmenter:>16} {r.path:<12} kept {r.kept:>6} rejected {r.rejected:>6}  chrF {r.chrf_mean}  "
        f"self-BLEU {r.self_bleu}  cosine {r.cosine_mean}",
        highlight=False,
    )
    if r.no_quality:
        err_console.print(f"{'':>17}no quality signals: {r.no_quality} of {r.views} views", highlight=False)
    if r.reasons:
        err_console.print(f"{'':>17}rejected: " + ", ".join(f"{k}: {n}" for k, n in r.reasons.items()), markup=False)
    if r.meaning is None:
        return
    err_console.print(Text(f"{'':>17}meaning filter, cosine to source: {summary_line(r.meaning)}"))
    for line in text_histogram(r.meaning):
        style = "yellow" if line.lstrip().startswith("──") else "red" if "✗" in line else None
        err_console.print(Text(f"{'':>17}{line}", style=style or ""))


SnapshotOption = Annotated[
    str | None, typer.Option("--snapshot", help="only the sentences of this snapshot's corpus (default: all views)")
]
OutOption = Annotated[Path, typer.Option("--out", help="folder for report.md and its PNG histograms")]
EncoderOption = Annotated[
    str, typer.Option("--encoder", help="encoder for cosine to source: embedded:NAME, a directory or a hub id")
]
CosineSampleOption = Annotated[
    int,
    typer.Option(
        "--cosine-sample",
        min=0,
        help="kept views per augmenter with cosine to source: the meaning filter's where it judged with this "
        "embedded: encoder, else encoded (0: none)",
    ),
]


@views_app.command()
def report(
    snapshot: SnapshotOption = None,
    out: OutOption = Path("views-report"),
    encoder: EncoderOption = "embedded:all-MiniLM-L6-v2",
    cosine_sample: CosineSampleOption = 1000,
    examples: Annotated[int, typer.Option("--examples", min=0, help="kept views shown per augmenter")] = 3,
    sql: Annotated[
        bool, typer.Option("--sql", help="print the report's lake queries (for viewmill sql) and stop")
    ] = False,
    state_dir: StateDir = None,
    catalog: CatalogOption = None,
) -> None:
    """Per augmenter: kept/rejected with reasons, chrF, length ratio, share identical, self-BLEU, cosine to the
    source, the meaning filter's stored cosines against its floor and ceiling, examples; Markdown plus PNG
    histograms in --out."""
    from viewmill.augment.views_report import (
        build_report,
        check_report_folder,
        cosine_filter_sql,
        reasons_sql,
        stats_sql,
        write_report,
    )

    if sql:
        queries = (stats_sql(snapshot), reasons_sql(snapshot), cosine_filter_sql(snapshot))
        console.print(";\n\n".join(queries) + ";", highlight=False, markup=False)
        return
    from viewmill.storage.output_paths import OutputGuard

    encode = _encoder(encoder) if cosine_sample else None
    from viewmill.storage.lake import open_lake  # here: a usage error starts without pyarrow and DuckDB
    with open_lake(load_settings(catalog), StatePaths.resolve(state_dir).lake, read_only=True) as lake:
        guard = OutputGuard.of(lake)
        check_report_folder(out, guard)  # before the report's work, not after it
        result = build_report(lake, snapshot, encode=encode, encoder_name=encoder, cosine_sample=cosine_sample,
                              examples=examples, progress=progress_bar)  # fmt: skip
    path = write_report(result, out, guard)
    for r in result.augmenters:
        _print_augmenter(r)
    console.print(str(path), highlight=False, markup=False)
