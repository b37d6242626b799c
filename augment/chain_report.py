"""The views report's chain section: what each hop of a chained translation costs.

A chain (path en>es>fr, or a round trip en>es>pt>es>en) is shown hop by hop beside the
augmenters of the same report that stop at its earlier hops (fwd_es, en>es): their views kept
and their chrF and cosine to the source, so a user sees how much a further hop loses."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class Reported(Protocol):
    """What the chain section reads of a views report's row (views_report.AugmenterReport)."""

    augmenter: str
    path: str
    views: int
    kept: int
    chrf_mean: float | None
    cosine_mean: float | None
    cosine_n: int


@dataclass(frozen=True)
class HopRow:
    chain: str  # the chained augmenter's path, e.g. en>es>fr
    hop: str  # this hop's languages, e.g. es>fr
    reached: str  # the path up to and including this hop
    by: Reported | None  # the augmenter whose views stop after this hop; None: none does


def hop_rows(reports: list[Reported]) -> list[HopRow]:
    """For every augmenter of two hops or more, one row per hop (in path order)."""
    by_path: dict[str, Reported] = {}
    for report in reports:
        by_path.setdefault(report.path, report)
    rows = []
    for report in reports:
        langs = report.path.split(">")
        if len(langs) < 3:
            continue
        for end in range(2, len(langs) + 1):
            reached = ">".join(langs[:end])
            by = report if end == len(langs) else by_path.get(reached)
            rows.append(HopRow(report.path, f"{langs[end - 2]}>{langs[end - 1]}", reached, by))
    return rows


def markdown_lines(reports: list[Reported]) -> list[str]:
    """The section's Markdown, or nothing when no augmenter chains engines."""
    rows = hop_rows(reports)
    if not rows:
        return []
    lines = [
        "## Chains: what each hop costs",
        "",
        "Each chained augmenter hop by hop, beside the augmenter whose views stop after that hop",
        "(views kept, and their chrF and cosine to the source sentence).",
        "",
        "| chain | hop | reached | augmenter | kept / views | chrF mean | cosine (n) |",
        "|---|---|---|---|--:|--:|--:|",
    ]
    for row in rows:
        if row.by is None:
            lines.append(f"| {row.chain} | {row.hop} | {row.reached} | (no augmenter stops here) | – | – | – |")
            continue
        r = row.by
        chrf = "–" if r.chrf_mean is None else f"{r.chrf_mean:.2f}"
        cosine = f"{r.cosine_mean:.3f} ({r.cosine_n})" if r.cosine_n and r.cosine_mean is not None else "–"
        lines.append(f"| {row.chain} | {row.hop} | {row.reached} | {r.augmenter} | {r.kept} / {r.views} | {chrf} "
                     f"| {cosine} |")  # fmt: skip
    return [*lines, ""]
