"""The meaning filter in the views report: per augmenter, the stored cosine of each view to its
source (what `filters.meaning` judged), its quantiles and a text histogram with the floor and
the ceiling drawn. The thresholds come from the recipe of the run that wrote the views
(`runs.recipe_json`): a configuration hash fixes them, so any such run gives the same ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from viewmill.augment.augmenters import augmenter_class

STEP = 0.05  # histogram bin width, before the thresholds are added as edges
BAR = 30  # characters of the longest bar
QUANTILES = {"p5": "p05", "p25": "p25", "median": "p50", "p75": "p75", "p95": "p95"}  # label -> column

# Bodies that follow the report's `scoped` CTE (see views_report._with_scope).
COSINE_FILTER_BODY = """,
thresholds AS (
    SELECT v.config_hash,
        any_value(json_extract_string(r.recipe_json, '$.filters.meaning.min_cosine')::DOUBLE) AS floor,
        any_value(json_extract_string(r.recipe_json, '$.filters.meaning.max_cosine')::DOUBLE) AS ceiling,
        any_value(json_extract_string(r.recipe_json, '$.filters.meaning.encoder')) AS encoder
    FROM (SELECT DISTINCT config_hash, run_id FROM scoped) v JOIN runs r USING (run_id)
    GROUP BY v.config_hash
)
SELECT augmenter, left(config_hash, 8) AS config, any_value(method) AS method,
    count(quality.cosine_to_source) AS n,
    round(quantile_cont(quality.cosine_to_source, 0.05), 4) AS p05,
    round(quantile_cont(quality.cosine_to_source, 0.25), 4) AS p25,
    round(quantile_cont(quality.cosine_to_source, 0.5), 4) AS p50,
    round(quantile_cont(quality.cosine_to_source, 0.75), 4) AS p75,
    round(quantile_cont(quality.cosine_to_source, 0.95), 4) AS p95,
    any_value(t.floor) AS floor, any_value(t.ceiling) AS ceiling, any_value(t.encoder) AS encoder
FROM scoped LEFT JOIN thresholds t USING (config_hash)
WHERE quality.cosine_to_source IS NOT NULL
GROUP BY augmenter, config_hash ORDER BY augmenter, config"""
STORED_COSINES_BODY = """
SELECT augmenter, left(config_hash, 8) AS config, quality.cosine_to_source AS cosine
FROM scoped WHERE quality.cosine_to_source IS NOT NULL"""


@dataclass
class CosineFilter:
    """One augmenter's stored cosines to the source and the thresholds they were judged by
    (None: no run record names them)."""

    method: str
    n: int
    p05: float
    p25: float
    p50: float
    p75: float
    p95: float
    floor: float | None
    ceiling: float | None
    encoder: str | None
    values: list[float] = field(default_factory=list)

    @property
    def exempt(self) -> bool:
        return augmenter_class(self.method).exempt_from_filters

    @property
    def below(self) -> int:
        return 0 if self.floor is None else sum(v < self.floor for v in self.values)

    @property
    def above(self) -> int:
        return 0 if self.ceiling is None else sum(v > self.ceiling for v in self.values)


@dataclass(frozen=True)
class Bin:
    lo: float
    hi: float
    count: int
    rejected: bool  # below the floor or above the ceiling


def edges(values: list[float], floor: float | None, ceiling: float | None) -> list[float]:
    """Bins of width STEP from below the lowest value (or the floor) up to 1, the thresholds
    added as edges so each bin lies wholly on one side of them."""
    cuts = [t for t in (floor, ceiling) if t is not None]
    lo = max(-1.0, math.floor(round(min([*values, *cuts, 1.0]) / STEP, 9)) * STEP)
    grid = np.round(np.arange(lo, 1.0 + STEP / 2, STEP), 6).tolist()
    return sorted({*grid, *(t for t in cuts if lo <= t <= 1.0)})


def histogram(cf: CosineFilter) -> list[Bin]:
    bounds = edges(cf.values, None if cf.exempt else cf.floor, None if cf.exempt else cf.ceiling)
    if len(bounds) < 2:  # every value is 1: one bin
        bounds = [bounds[0] - STEP, bounds[0]]
    counts, _ = np.histogram(np.clip(cf.values, -1.0, 1.0), bins=bounds)
    out = []
    for lo, hi, count in zip(bounds[:-1], bounds[1:], counts, strict=True):
        rejected = not cf.exempt and (
            (cf.floor is not None and hi <= cf.floor) or (cf.ceiling is not None and lo >= cf.ceiling)
        )
        out.append(Bin(lo, hi, int(count), rejected))
    return out


def marker(cf: CosineFilter, edge: float) -> str | None:
    """The threshold line drawn at a bin edge, if one lies there."""
    if cf.exempt:
        return None
    if cf.floor is not None and math.isclose(edge, cf.floor):
        return f"floor {cf.floor:g}: below it the meaning changed"
    if cf.ceiling is not None and math.isclose(edge, cf.ceiling):
        return f"ceiling {cf.ceiling:g}: above it nothing changed"
    return None


def text_histogram(cf: CosineFilter) -> list[str]:
    """The histogram as text lines, the floor and ceiling drawn as rules; '✗' marks rejected bins."""
    bins = histogram(cf)
    top = max((b.count for b in bins), default=0) or 1
    lines = []
    if bins and (line := marker(cf, bins[0].lo)):
        lines.append(f"{'':12}── {line} ──")
    for b in bins:
        bar = "█" * math.ceil(b.count / top * BAR) if b.count else ""
        lines.append(f"{b.lo:5.2f}–{b.hi:5.2f} {'✗' if b.rejected else ' '}{bar:<{BAR}} {b.count}")
        if line := marker(cf, b.hi):
            lines.append(f"{'':12}── {line} ──")
    return lines


def summary_line(cf: CosineFilter) -> str:
    quantiles = " ".join(f"{label} {getattr(cf, column):.3f}" for label, column in QUANTILES.items())
    if cf.exempt:
        judged = f"{cf.method}: exempt, not filtered"
    elif cf.floor is None or cf.ceiling is None:
        judged = "thresholds: not recorded in runs"
    else:
        judged = f"floor {cf.floor:g} ({cf.below} below), ceiling {cf.ceiling:g} ({cf.above} above)"
    return f"n {cf.n}, {quantiles}; {judged}; encoder {cf.encoder or '?'}"


def markdown_lines(label: str, cf: CosineFilter) -> list[str]:
    return [f"### {label}", "", summary_line(cf), "", "```text", *text_histogram(cf), "```", ""]
