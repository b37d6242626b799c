"""The end-of-run summary as rich tables."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def render_summary(summary: dict[str, Any], console: Console | None = None) -> None:
    """Print each stage's part of a run summary (RunSummary.as_dict), then the timings."""
    console = console or Console()
    if summary.get("ingest"):
        _print_ingest(console, summary["ingest"])
    _print_augment(console, summary.get("augment", {}))
    if summary.get("snapshot"):
        snap = summary["snapshot"]
        state = "created" if snap["created"] else "already existed (same pairs)"
        console.print(f"[bold]pairs snapshot[/] {snap['name']}: {snap['n_pairs']} pairs, {state}")
    if summary.get("train"):
        _print_train(console, summary["train"])
    if summary.get("soup"):
        _print_soup(console, summary["soup"])
    if summary.get("evals", []):
        console.print(_eval_table(summary["evals"]))
        for label, start in dict.fromkeys((e["model"], e["same_as"]) for e in summary["evals"] if e.get("same_as")):
            console.print(f"{label}: its weights are {start}'s, tensor for tensor: {start}'s scores are shown for it, "
                          "not scored again", highlight=False)  # fmt: skip
    timings = Table(title=f"run {summary['run_id']}: seconds per stage")
    for name in summary["timings"]:
        timings.add_column(name, justify="right")
    timings.add_row(*(f"{v:.1f}" for v in summary["timings"].values()))
    console.print(timings)


def _print_ingest(console: Console, ingest: dict[str, Any]) -> None:
    console.print(
        f"[bold]corpus[/] {ingest['corpus']}: {ingest['sentences']} sentences "
        f"({ingest['new_sentences']} new; {ingest['duplicates']} duplicates, {ingest['too_short']} too short, "
        f"{ingest['too_long']} too long, {ingest['blank']} blank lines skipped)"
    )


def _print_augment(console: Console, augment: dict[str, dict[str, Any]]) -> None:
    table = Table(title="augment")
    table.add_column("augmenter")
    for col in ("views cached", "views new", "kept", "rejected", "MT cached", "MT new"):
        table.add_column(col, justify="right")
    for name, r in augment.items():
        table.add_row(
            name,
            str(r["reused_views"]),
            str(r["new_views"]),
            str(r["kept"]),
            str(r["rejected"]),
            str(r["cache"]["hits"]),
            str(r["cache"]["misses"]),
        )
    if table.row_count:
        console.print(table)
        console.print(
            "views cached: already in the lake for this augmenter; MT cached/new: translation-cache hits/misses"
        )


def _print_train(console: Console, trained: dict[str, Any]) -> None:
    how = (
        "reused (same pairs, config and base model)"
        if trained["reused"]
        else (
            f"{trained['steps']} steps in {trained['seconds']:.0f}s, "
            f"loss {trained['first_loss']:.3f} -> {trained['last_loss']:.3f}"
        )
    )
    console.print(f"[bold]model[/] {trained['path']}: {how}")
    if trained.get("selected_step") == 0:
        console.print(
            "[bold yellow]no improvement over the start[/]: no dev evaluation beat the starting model, so the "
            "exported model is the starting model unchanged (selected_step 0), not a trained result"
        )


def _eval_table(evals: list[dict[str, Any]]) -> Table:
    """Tasks as rows, models as columns (and their delta when there are two)."""
    labels = list(dict.fromkeys(e["model"] for e in evals))
    tasks = list(dict.fromkeys(e["task"] for e in evals))
    cached = " (stored results)" if all(e["reused"] for e in evals) else ""
    table = Table(title=f"evaluation: Spearman x100 of cosine similarity{cached}")
    table.add_column("task")
    table.add_column("pairs", justify="right")
    for label in labels:
        table.add_column(label, justify="right")
    if len(labels) == 2:
        table.add_column("delta", justify="right")
    for task in tasks:
        by_model = {e["model"]: e for e in evals if e["task"] == task}
        values = [by_model[label]["value"] for label in labels]
        row = [task, str(by_model[labels[0]]["n"]), *(f"{v:.2f}" for v in values)]
        if len(labels) == 2:
            row.append(f"{values[1] - values[0]:+.2f}")
        table.add_row(*row)
    return table


def _print_soup(console: Console, soup: dict[str, Any]) -> None:
    """The soup's mixes: each model's weight, every dev score, which the rule allowed and which won."""
    from viewmill.pipelines.stages.soup import mix_rows

    how = "reused (same models, shares, dev data and code)" if soup["reused"] else "made in this run"
    what = "soup" if soup["exported"] else "soup not exported: the recipe's own model alone scored best on dev,"
    console.print(f"[bold]{what}[/] {soup['path']}: {how}")
    header, rows = mix_rows(soup)
    table = Table(title="soup: candidate mixes on dev (the chosen one marked *)")
    for column in header:
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(*row)
    console.print(table)
