"""Which views help: per augmenter, what was kept and rejected (and why), how close the
views stay to their source (chrF, length ratio, cosine under an encoder), how diverse they
are (share identical to the source, self-BLEU against the sentence's other views), what each
hop of a chained translation costs (`viewmill.augment.chain_report`) and a sample, as
Markdown plus PNG histograms.

The counts and stored quality figures are one SQL query over the lake (`stats_sql`), so
`viewmill sql` gives the same numbers; self-BLEU and cosine are computed here (cosine from the
meaning filter's stored values where it judged with the report's encoder). Where the meaning
filter ran, the cosines it stored and its thresholds are shown too (`cosine_filter_sql`,
`viewmill.augment.meaning_report`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from sacrebleu.metrics import BLEU
from viewmill.augment import chain_report
from viewmill.augment.augmenters import augmenter_class
from viewmill.augment.meaning_report import COSINE_FILTER_BODY, STORED_COSINES_BODY, CosineFilter, markdown_lines
from viewmill.storage.catalog import unknown_snapshot
from viewmill.storage.lake import Lake, LakeError
from viewmill.storage.output_paths import OutputGuard
from viewmill.storage.snapshots import snapshot_names

Key = tuple[str, str]  # (augmenter, config hash prefix)
Encode = Callable[[list[str]], np.ndarray]  # texts -> one embedding per row
Advance = Callable[[int, int], None]  # (done, total)
# (description, total) -> a block yielding `advance`: the CLI's progress bars, or none.
ProgressFactory = Callable[[str, int | None], AbstractContextManager[Advance]]
BLEU_STEP = 500  # sentences between self-BLEU progress reports


@contextmanager
def no_progress(description: str, total: int | None = None) -> Iterator[Advance]:
    yield lambda done, total: None


# Views of the snapshot's corpus version (every sentence it paired from), or of the whole lake;
# sentences may list one text under several corpora, hence DISTINCT (one row per view).
_SCOPE = """
scoped AS (
    SELECT v.*, s.text AS source FROM views v
    JOIN (SELECT DISTINCT sentence_id, text FROM sentences) s USING (sentence_id)
    WHERE {where}
)"""
_IN_SNAPSHOT = (
    "v.sentence_id IN (SELECT m.sentence_id FROM corpus_members m JOIN snapshots p USING (corpus_version) "
    "WHERE p.snapshot = {snapshot})"
)
_STATS = """
SELECT augmenter, left(config_hash, 8) AS config, any_value(method) AS method, any_value(path) AS path,
    count(*) AS views,
    count(*) FILTER (WHERE status = 'kept') AS kept,
    count(*) FILTER (WHERE status = 'rejected') AS rejected,
    round(avg(quality.chrf_to_source) FILTER (WHERE status = 'kept'), 2) AS chrf_mean,
    round(median(quality.chrf_to_source) FILTER (WHERE status = 'kept'), 2) AS chrf_median,
    round(avg(quality.length_ratio) FILTER (WHERE status = 'kept'), 3) AS length_ratio_mean,
    round(avg(quality.identical_to_source::INT) FILTER (WHERE status = 'kept'), 4) AS identical_share,
    count(*) FILTER (WHERE quality IS NULL) AS no_quality
FROM scoped GROUP BY augmenter, config_hash ORDER BY augmenter, config"""
# A reason's kind: "near-duplicate:<view id>" counts as near-duplicate.
_REASONS = """
SELECT augmenter, left(config_hash, 8) AS config, split_part(reject_reason, ':', 1) AS reject_reason, count(*) AS n
FROM scoped WHERE status = 'rejected' GROUP BY ALL ORDER BY augmenter, config, n DESC, reject_reason"""


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _with_scope(body: str, snapshot: str | None) -> str:
    where = _IN_SNAPSHOT.format(snapshot=_literal(snapshot)) if snapshot else "true"
    return "WITH" + _SCOPE.format(where=where) + body


def stats_sql(snapshot: str | None = None) -> str:
    """Per augmenter: views, kept, rejected, chrF and length ratio of kept views, share identical,
    and views without quality signals (written outside viewmill: left out of those figures)."""
    return _with_scope(_STATS, snapshot).strip()


def reasons_sql(snapshot: str | None = None) -> str:
    """Per augmenter: rejected views by reason."""
    return _with_scope(_REASONS, snapshot).strip()


def cosine_filter_sql(snapshot: str | None = None) -> str:
    """Per augmenter judged by the meaning filter: quantiles of the stored cosine to the source,
    and the floor, ceiling and encoder from the recipe of the run that wrote the views."""
    return _with_scope(COSINE_FILTER_BODY, snapshot).strip()


@dataclass
class AugmenterReport:
    augmenter: str
    config: str
    method: str
    path: str
    views: int
    kept: int
    rejected: int
    chrf_mean: float | None
    chrf_median: float | None
    length_ratio_mean: float | None
    identical_share: float | None
    no_quality: int = 0  # views without quality signals (a user's INSERT, a plugin's rows)
    reasons: dict[str, int] = field(default_factory=dict)
    self_bleu: float | None = None  # mean BLEU of a view against the sentence's other views
    self_bleu_n: int = 0
    cosine_mean: float | None = None
    cosine_n: int = 0
    chrf: list[float] = field(default_factory=list)
    length_ratio: list[float] = field(default_factory=list)
    cosine: list[float] = field(default_factory=list)
    examples: list[dict[str, str | None]] = field(default_factory=list)
    meaning: CosineFilter | None = None  # the cosines the meaning filter stored, when it ran

    @property
    def label(self) -> str:
        return f"{self.augmenter} ({self.path})"


@dataclass
class ViewsReport:
    snapshot: str | None
    augmenters: list[AugmenterReport]
    encoder: str | None = None


_KEPT_ORDER = "ORDER BY augmenter, config, hash(sentence_id), sentence_id"  # stable, spread over the corpus


def _kept_values(lake: Lake, snapshot: str | None):
    """Each kept view's chrF and length ratio by augmenter (no texts: a million views' are GBs)."""
    sql = _with_scope(
        "\nSELECT augmenter, left(config_hash, 8) AS config, method, quality.chrf_to_source AS chrf, "
        f"quality.length_ratio AS length_ratio FROM scoped WHERE status = 'kept' {_KEPT_ORDER}",
        snapshot,
    )
    return lake.polars(sql)


def _kept_texts(lake: Lake, snapshot: str | None, first: int | None = None, configs: Sequence[str] = ()):
    """Kept views with their source texts: the `first` of each augmenter (the cosine sample),
    or every one of `configs`' (self-BLEU compares the views of one sentence)."""
    order = "ORDER BY hash(sentence_id), sentence_id"
    limit = f" QUALIFY row_number() OVER (PARTITION BY augmenter, config_hash {order}) <= {first}"
    chosen = " AND left(config_hash, 8) IN (" + ", ".join(_literal(c) for c in configs) + ")" if configs else ""
    sql = _with_scope(
        "\nSELECT augmenter, left(config_hash, 8) AS config, sentence_id, source, text, "
        "quality.cosine_to_source AS stored_cosine FROM scoped WHERE status = 'kept'"
        f"{chosen}{limit if first is not None else ''} {_KEPT_ORDER}",
        snapshot,
    )
    return lake.polars(sql)


def _examples(lake: Lake, snapshot: str | None, per_augmenter: int) -> dict[tuple[str, str], list[dict]]:
    """A few kept and rejected views per augmenter, chosen by a hash of the sentence id (stable)."""
    sql = _with_scope(
        "\nSELECT augmenter, left(config_hash, 8) AS config, status, reject_reason, source, text FROM ("
        " SELECT *, row_number() OVER (PARTITION BY augmenter, config_hash, status"
        " ORDER BY hash(sentence_id), sentence_id) AS k FROM scoped)"
        f" WHERE k <= CASE status WHEN 'kept' THEN {per_augmenter} ELSE {max(1, per_augmenter // 2)} END"
        " ORDER BY augmenter, config, status, k",
        snapshot,
    )
    out: dict[tuple[str, str], list[dict]] = {}
    for row in lake.arrow(sql).to_pylist():
        out.setdefault((row.pop("augmenter"), row.pop("config")), []).append(row)
    return out


def self_bleu(
    views_by_sentence: dict[str, dict[Key, str]], on_progress: Advance | None = None
) -> dict[Key, list[float]]:
    """For every sentence with two or more views: each view's sentence BLEU against the other
    views as references (higher: the views repeat each other). Keyed by the view's augmenter.
    `on_progress(done, total)` counts those sentences."""
    bleu = BLEU(effective_order=True)
    scores: dict[Key, list[float]] = {}
    shared = [views for views in views_by_sentence.values() if len(views) >= 2]
    if on_progress is not None:
        on_progress(0, len(shared))
    for done, views in enumerate(shared, start=1):
        for name, text in views.items():
            others = [t for n, t in views.items() if n != name]
            scores.setdefault(name, []).append(bleu.sentence_score(text, others).score)
        if on_progress is not None and (done % BLEU_STEP == 0 or done == len(shared)):
            on_progress(done, len(shared))
    return scores


def _cosines(encode: Encode, sources: list[str], views: list[str], known: dict[str, np.ndarray]) -> list[float]:
    """Cosine of each view to its source, computed as the meaning filter does (unit rows in
    float64, clipped to [-1, 1]); only texts not in `known` (unit rows so far) are embedded."""
    todo = list(dict.fromkeys(t for t in sources + views if t not in known))
    if todo:
        emb = np.asarray(encode(todo), dtype=np.float64)
        emb /= np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
        known.update(zip(todo, emb, strict=True))
    return [float(np.clip(known[a] @ known[b], -1.0, 1.0)) for a, b in zip(sources, views, strict=True)]


def build_report(
    lake: Lake,
    snapshot: str | None = None,
    *,
    encode: Encode | None = None,
    encoder_name: str | None = None,
    cosine_sample: int = 1000,
    examples: int = 3,
    progress: ProgressFactory = no_progress,
) -> ViewsReport:
    """The report over the snapshot's corpus (or every view in the lake). Cosine is computed
    for up to `cosine_sample` kept views per augmenter when `encode` is given. `progress` shows
    the slow parts (cosine, self-BLEU) as they go."""
    if snapshot and lake.scalar("SELECT count(*) FROM snapshots WHERE snapshot = ?", [snapshot]) == 0:
        raise unknown_snapshot(snapshot, snapshot_names(lake))
    rows = lake.arrow(stats_sql(snapshot)).to_pylist()
    if not rows:
        where = f"snapshot {snapshot}'s corpus" if snapshot else "the lake"
        raise LakeError(f"{where} has no views yet: run a recipe (viewmill run RECIPE) first")
    reports = {(r["augmenter"], r["config"]): AugmenterReport(**r) for r in rows}
    for r in lake.arrow(reasons_sql(snapshot)).to_pylist():
        reports[(r["augmenter"], r["config"])].reasons[r["reject_reason"]] = r["n"]
    for key, sample in _examples(lake, snapshot, examples).items():
        reports[key].examples = sample
    _add_cosine_filter(lake, snapshot, reports)

    by_sentence = _add_kept_values(lake, snapshot, reports)
    if encode is not None:
        heads = _kept_texts(lake, snapshot, first=cosine_sample).group_by(["augmenter", "config"], maintain_order=True)
        _add_cosines(reports, list(heads), encode, encoder_name, cosine_sample, progress)
    with progress("views report: self-BLEU (sentences)", None) as advance:
        scored = self_bleu(by_sentence, on_progress=advance)
    for key, scores in scored.items():
        report = reports[key]
        report.self_bleu, report.self_bleu_n = round(float(np.mean(scores)), 2), len(scores)
    return ViewsReport(snapshot, list(reports.values()), encoder_name if encode is not None else None)


def _add_kept_values(
    lake: Lake, snapshot: str | None, reports: dict[Key, AugmenterReport]
) -> dict[str, dict[Key, str]]:
    """Each report's chrF and length ratios; returned, the texts self-BLEU compares by sentence
    (none unless two augmenters that are not copies of the source made views)."""
    compared: set[Key] = set()  # chrF already says how close a copy of the source is
    for key, group in _kept_values(lake, snapshot).group_by(["augmenter", "config"], maintain_order=True):
        report = reports[key]
        report.chrf = group["chrf"].drop_nulls().to_list()
        report.length_ratio = group["length_ratio"].drop_nulls().to_list()
        if not augmenter_class(group["method"][0]).is_source_copy:
            compared.add(key)
    by_sentence: dict[str, dict[Key, str]] = {}
    if len(compared) < 2:  # no sentence has two views to compare
        return by_sentence
    texts = _kept_texts(lake, snapshot, configs=sorted(config for _, config in compared))
    for augmenter, config, sentence, text in texts.select(["augmenter", "config", "sentence_id", "text"]).iter_rows():
        if (augmenter, config) in compared:
            by_sentence.setdefault(sentence, {})[(augmenter, config)] = text
    return by_sentence


def _add_cosine_filter(lake: Lake, snapshot: str | None, reports: dict[Key, AugmenterReport]) -> None:
    """The meaning filter's stored cosines and thresholds, for the augmenters it judged."""
    values = lake.polars(_with_scope(STORED_COSINES_BODY, snapshot))
    by_key = {key: group["cosine"].to_list() for key, group in values.group_by(["augmenter", "config"])}
    for row in lake.arrow(cosine_filter_sql(snapshot)).to_pylist():
        key = (row.pop("augmenter"), row.pop("config"))
        reports[key].meaning = CosineFilter(**row, values=by_key[key])


def _add_cosines(reports: dict[Key, AugmenterReport], groups: list, encode: Encode, encoder_name: str | None,
                 sample: int, progress: ProgressFactory) -> None:  # fmt: skip
    """Cosine to the source of up to `sample` kept views per augmenter (the first by a hash of
    the sentence id): the meaning filter's stored cosine where it judged with this encoder, else
    embedded, each distinct text once (at most 2 x `sample` rows per augmenter held). The encoder
    loads on its first batch, inside the progress block, and not at all when nothing lacks one."""
    total = sum(min(sample, len(group)) for _, group in groups)
    known: dict[str, np.ndarray] = {}
    with progress("views report: cosine to source (views)", total) as advance:
        done = 0
        for key, group in groups:
            head = group.head(sample)
            report = reports[key]
            stored = _stored_cosines(report, head, encoder_name)
            missing = [i for i, value in enumerate(stored) if value is None]
            sources, texts = head["source"].to_list(), head["text"].to_list()
            embedded = _cosines(encode, [sources[i] for i in missing], [texts[i] for i in missing], known)
            computed = dict(zip(missing, embedded, strict=True))
            report.cosine = [computed.get(i, value) for i, value in enumerate(stored)]
            report.cosine_n = len(report.cosine)
            report.cosine_mean = round(float(np.mean(report.cosine)), 4)
            done += len(head)
            advance(done, total)


def _stored_cosines(report: AugmenterReport, head, encoder_name: str | None) -> list[float | None]:
    """Per view, the cosine the meaning filter stored when the recipe named the same packaged
    encoder, else None: a model folder or hub id of the same name may hold other weights now."""
    judged = (
        report.meaning is not None and encoder_name is not None and encoder_name.startswith("embedded:")
        and report.meaning.encoder == encoder_name
    )  # fmt: skip
    return head["stored_cosine"].to_list() if judged else [None] * len(head)


def _fmt(value: float | None, digits: int = 2) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def to_markdown(report: ViewsReport, figures: Sequence[str] = ()) -> str:
    scope = f"snapshot `{report.snapshot}` (its corpus)" if report.snapshot else "every view in the lake"
    lines = [
        f"# Views report: {scope}",
        "",
        "Quality figures are over kept views. Self-BLEU: a view's BLEU against the same sentence's views",
        "from the other augmenters (identity excluded); lower means more diverse.",
        f"Cosine to source: {report.encoder or 'not computed (no encoder)'}.",
        "",
        "| augmenter | path | views | kept | rejected | chrF mean | chrF median | length ratio | identical "
        "| self-BLEU | cosine (n) |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for r in report.augmenters:
        shared = sum(x.augmenter == r.augmenter for x in report.augmenters) > 1
        name = f"{r.augmenter} [{r.config}]" if shared else r.augmenter
        cosine = f"{_fmt(r.cosine_mean, 3)} ({r.cosine_n})" if r.cosine_n else "–"
        lines.append(
            f"| {name} | {r.path} | {r.views} | {r.kept} | {r.rejected} | {_fmt(r.chrf_mean)} | {_fmt(r.chrf_median)} "
            f"| {_fmt(r.length_ratio_mean, 3)} | {_fmt(r.identical_share, 3)} | {_fmt(r.self_bleu)} | {cosine} |"
        )
    lines += [*_no_quality_lines(report.augmenters), "", *chain_report.markdown_lines(report.augmenters)]
    lines += ["## Rejections", ""]
    for r in report.augmenters:
        reasons = ", ".join(f"{reason}: {n}" for reason, n in r.reasons.items()) or "none"
        lines.append(f"- {r.augmenter}: {reasons}")
    judged = [r for r in report.augmenters if r.meaning is not None]
    if judged:
        lines += ["", "## Meaning filter: cosine to source (every view)", ""]
        lines += [line for r in judged for line in markdown_lines(r.label, r.meaning)]
    if figures:
        lines += ["", "## Histograms (kept views)", ""] + [f"![{Path(f).stem}]({Path(f).name})" for f in figures]
    lines += ["", "## Examples", ""]
    for r in report.augmenters:
        lines.append(f"### {r.augmenter} ({r.path})")
        lines.append("")
        for ex in r.examples:
            status = "kept" if ex["status"] == "kept" else f"rejected: {ex['reject_reason']}"
            lines.append(f"- source: {ex['source']}\n  view ({status}): {ex['text'] or '(empty)'}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _no_quality_lines(reports: list[AugmenterReport]) -> list[str]:
    """The augmenters with views that carry no quality signals, or nothing when every view does."""
    lacking = [r for r in reports if r.no_quality]
    if not lacking:
        return []
    lines = ["", "No quality signals (views written outside viewmill: by SQL, a plugin), so not in the figures above:"]
    return lines + [f"- {r.augmenter}: {r.no_quality} of {r.views} views" for r in lacking]


def write_histograms(report: ViewsReport, folder: Path, guard: OutputGuard) -> list[Path]:
    """One PNG per figure (chrF, length ratio, cosine when computed), augmenters overlaid."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures = [("chrf", "chrF to source", (0, 100)), ("length_ratio", "length ratio (view / source)", (0, 2.5))]
    if any(r.cosine for r in report.augmenters):
        figures.append(("cosine", f"cosine to source ({report.encoder})", (-0.2, 1.0)))
    written = []
    for attr, title, limits in figures:
        fig, ax = plt.subplots(figsize=(7, 4))
        bins = np.linspace(*limits, 41)
        for r, color in zip(report.augmenters, itertools.cycle(plt.rcParams["axes.prop_cycle"].by_key()["color"]),
                            strict=False):  # fmt: skip
            values = np.clip(getattr(r, attr), *limits)
            if len(values):
                ax.hist(values, bins=bins, histtype="step", linewidth=1.5, color=color, label=r.label, density=True)
        ax.set_xlabel(title)
        ax.set_ylabel("density")
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = folder / f"{attr}.png"
        with guard.atomic(path) as partial:
            fig.savefig(partial, dpi=100)
        plt.close(fig)
        written.append(path)
    return written


# Every file write_report may write in its folder (the figures are write_histograms' `attr`s).
REPORT_FILES = ("report.md", "chrf.png", "length_ratio.png", "cosine.png")


def check_report_folder(folder: Path, guard: OutputGuard) -> None:
    """Refuse (OutputRefused) a report folder, or a file name in it, that reaches the lake: called
    before the report's work, so nothing is computed, or half written, for a path that is refused."""
    guard.check(folder)
    for name in REPORT_FILES:
        guard.check(folder / name)


def write_report(report: ViewsReport, folder: Path, guard: OutputGuard) -> Path:
    """report.md and its PNG histograms in `folder`, each file kept off the lake and written whole
    by `guard`; returns the Markdown file."""
    check_report_folder(folder, guard)
    guard.folder(folder)
    figures = write_histograms(report, folder, guard)
    path = folder / "report.md"
    return guard.write_text(path, to_markdown(report, [str(f) for f in figures]))
