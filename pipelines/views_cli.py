"""`viewmill views report`: which augmenters give views that help (see viewmill.augment.views_report)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from viewmill.augment.views_report import build_report, reasons_sql, stats_sql, write_report
from viewmill.pipelines.state import StatePaths
from viewmill.storage.settings import Settings

console = Console(width=None if sys.stdout.isatty() else 240)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 240)

views_app = typer.Typer(help="Inspect the augmented views.", no_args_is_help=True,
                        context_settings={"help_option_names": ["-h", "--help"]})  # fmt: skip


def _encoder(ref: str):
    """Texts -> unit embeddings under `ref` (the recipes' start encoder by default)."""
    from viewmill.train.encoder import load_sentence_model, resolve_encoder

    model = load_sentence_model(resolve_encoder(ref))
    return lambda texts: model.encode(texts, batch_size=128, convert_to_numpy=True, show_progress_bar=False)


@views_app.command()
def report(
    snapshot: Annotated[
        str | None, typer.Option("--snapshot", help="only the sentences of this snapshot's corpus (default: all views)")
    ] = None,
    out: Annotated[Path, typer.Option("--out", help="folder for report.md and its PNG histograms")] = Path(
        "views-report"
    ),
    encoder: Annotated[
        str, typer.Option("--encoder", help="encoder for cosine to source: embedded:NAME, a directory or a hub id")
    ] = "embedded:all-MiniLM-L6-v2",
    cosine_sample: Annotated[
        int, typer.Option("--cosine-sample", min=0, help="kept views per augmenter encoded for cosine (0: none)")
    ] = 1000,
    examples: Annotated[int, typer.Option("--examples", min=0, help="kept views shown per augmenter")] = 3,
    sql: Annotated[
        bool, typer.Option("--sql", help="print the report's lake queries (for viewmill sql) and stop")
    ] = False,
    state_dir: Annotated[
        Path | None, typer.Option("--state-dir", help="state directory (default $VIEWMILL_HOME or ./.viewmill)")
    ] = None,
    catalog: Annotated[str | None, typer.Option("--catalog", help="lake catalog (default $VIEWMILL_CATALOG)")] = None,
) -> None:
    """Per augmenter: kept/rejected with reasons, chrF, length ratio, share identical, self-BLEU,
    cosine to the source, examples; Markdown plus PNG histograms in --out."""
    if sql:
        console.print(f"{stats_sql(snapshot)};\n\n{reasons_sql(snapshot)};", highlight=False, markup=False)
        return
    settings = Settings().with_overrides(catalog=catalog)
    with settings.open_lake(StatePaths.resolve(state_dir).lake, read_only=True) as lake:
        encode = _encoder(encoder) if cosine_sample else None
        result = build_report(lake, snapshot, encode=encode, encoder_name=encoder, cosine_sample=cosine_sample,
                              examples=examples)  # fmt: skip
    path = write_report(result, out)
    for r in result.augmenters:
        err_console.print(
            f"{r.augmenter:>16} {r.path:<12} kept {r.kept:>6} rejected {r.rejected:>6}  chrF {r.chrf_mean}  "
            f"self-BLEU {r.self_bleu}  cosine {r.cosine_mean}",
            highlight=False,
        )
    console.print(str(path), highlight=False, markup=False)
