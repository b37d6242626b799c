"""What a run shows in Prefect: one log line per stage result, the run's own views per
augmenter and status, a sample of its round trips, the training and evaluation tables; and
the event that says a new pairs snapshot exists. Plain functions: no Prefect import here."""

from __future__ import annotations

from typing import Any

from viewmill.augment.views import AugmentReport
from viewmill.pipelines.stages.augment import AugmentPlan
from viewmill.pipelines.stages.evaluate import EvalRow
from viewmill.pipelines.stages.ingest import IngestReport
from viewmill.pipelines.stages.preflight import PreflightResult
from viewmill.pipelines.stages.soup import SoupResult, mix_rows
from viewmill.pipelines.stages.train import TrainResult
from viewmill.storage.lake import Lake
from viewmill.storage.snapshots import Snapshot

SNAPSHOT_EVENT = "viewmill.snapshot.created"

# The run's views: those of its augmenters' configurations on the corpus version it read;
# `views` counts them all (new and reused), `written_by_run` only what this run wrote.
_RUN_VIEWS = """
    FROM views v JOIN corpus_members m ON m.sentence_id = v.sentence_id AND m.corpus_version = ?
    WHERE list_contains(?, v.augmenter) AND list_contains(?, v.augmenter || '/' || v.config_hash)
"""


def _run_view_params(corpus_version: str, configs: dict[str, str]) -> list[Any]:
    return [corpus_version, sorted(configs), sorted(f"{name}/{digest}" for name, digest in configs.items())]


def run_view_counts(lake: Lake, run_id: str, corpus_version: str, configs: dict[str, str]) -> list[dict[str, Any]]:
    """Views per augmenter, status and reason of one run: `configs` maps its augmenters to
    their configuration hashes. Views other recipes or configurations made are not counted."""
    return lake.arrow(
        f"""
        SELECT v.augmenter, v.status, coalesce(v.reject_reason, '') AS reason, count(*) AS views,
               count(*) FILTER (WHERE v.run_id = ?) AS written_by_run
        {_RUN_VIEWS}
        GROUP BY ALL ORDER BY ALL
        """,
        [run_id, *_run_view_params(corpus_version, configs)],
    ).to_pylist()


def round_trip_sample(lake: Lake, corpus_version: str, configs: dict[str, str], n: int = 10) -> str:
    """A Markdown table of the run's views of n sources (a fixed, repeatable sample)."""
    rows = lake.arrow(
        f"""
        WITH run_views AS (SELECT v.* {_RUN_VIEWS}),
             chosen AS (SELECT DISTINCT sentence_id FROM run_views ORDER BY sentence_id LIMIT ?)
        SELECT s.text AS source, v.path, v.text AS view, v.status, round(v.quality.chrf_to_source, 1) AS chrf
        FROM run_views v JOIN chosen USING (sentence_id)
        JOIN (SELECT DISTINCT sentence_id, text FROM sentences) s USING (sentence_id)
        ORDER BY v.sentence_id, v.path, v.augmenter
        """,
        [*_run_view_params(corpus_version, configs), n],
    ).to_pylist()
    lines = ["| source | path | view | status | chrF |", "|---|---|---|---|---|"]
    for r in rows:
        cells = [r["source"], r["path"], r["view"], r["status"], "" if r["chrf"] is None else f"{r['chrf']}"]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def eval_table(evals: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"model": e["model"], "task": e["task"], "spearman_x100": round(e["value"], 2), "pairs": e["n"]}
            for e in evals]  # fmt: skip


def training_markdown(train: dict[str, Any], snapshot: dict[str, Any] | None) -> str:
    """The training stage of a run (TrainResult.as_dict): which model, where, from which
    pairs, trained or reused, the exported step and the losses and dev scores when it trained."""
    rows = [
        ("model", train["model_id"]),
        ("path", train["path"]),
        ("trained", "reused (same pairs, config, base model and code)" if train["reused"] else "in this run"),
        ("pairs snapshot", "" if snapshot is None else f"{snapshot['name']} ({snapshot['n_pairs']} pairs)"),
        ("selected step", _selected(train.get("selected_step"))),
    ]
    if not train["reused"]:
        rows += [("steps", train["steps"]), ("pairs read", train["pairs"]),
                 ("loss", f"{train['first_loss']:.4f} -> {train['last_loss']:.4f}"),
                 ("seconds", f"{train['seconds']:.1f}")]  # fmt: skip
    lines = ["| | |", "|---|---|", *(f"| {name} | {_cell(value)} |" for name, value in rows)]
    lines += _dev_table(train.get("dev_evals") or [], train.get("dev_task_evals") or {})
    return "\n".join(lines) + "\n"


def soup_markdown(soup: dict[str, Any]) -> str:
    """The soup stage of a run (SoupResult.as_dict): the final model, each candidate mix's weights and scores."""
    header, rows = mix_rows(soup)
    made = "reused" if soup["reused"] else "made in this run"
    what = "soup" if soup["exported"] else "no soup exported (the recipe's own model alone scored best on dev):"
    lines = [f"{what} `{soup['path']}` ({made}); chosen mix: *", "", "| " + " | ".join(header) + " |",
             "|---" * len(header) + "|", *("| " + " | ".join(row) + " |" for row in rows)]  # fmt: skip
    return "\n".join(lines) + "\n"


def _dev_table(evals: list, per_task: dict[str, list]) -> list[str]:
    """The dev score of each evaluated step; over several dev tasks each task's and the selection score."""
    if not evals:
        return []
    if len(per_task) < 2:
        return ["", "| step | dev spearman x100 |", "|---|---|", *(f"| {s} | {v:.2f} |" for s, v in evals)]
    tasks = {task: dict(rows) for task, rows in per_task.items()}
    lines = ["", "| step | " + " | ".join(_cell(task) for task in tasks) + " | selection score |",
             "|---" * (len(tasks) + 2) + "|"]  # fmt: skip
    for step, score in evals:
        cells = [f"{scores[step]:.2f}" if step in scores else "" for scores in tasks.values()]
        lines.append(f"| {step} | " + " | ".join(cells) + f" | {score:.2f} |")
    return lines


def _selected(step: int | None) -> str:
    if step is None:
        return "the last step (no dev set)"
    return "0 (the starting model scored best on dev)" if step == 0 else str(step)


def describe_stage(result: Any) -> str | None:
    """One line that says what a stage did, for the run's log (None for results it does not know)."""
    if isinstance(result, PreflightResult):
        sample = f"{result.sampled} records from the start of {result.sources} corpus source(s)"
        return f"preflight: {sample} checked; encoder {result.encoder or '(no training)'}"
    if isinstance(result, IngestReport):
        s = result.stats
        return (
            f"ingest: corpus {result.corpus} version {result.corpus_version[:12]}: {result.sentences} sentences "
            f"({result.new_sentences} new); dropped: duplicates {s.duplicates}, too short {s.too_short}, "
            f"too long {s.too_long}, malformed {s.malformed}; {result.new_nli_pairs} new NLI pairs"
        )
    if isinstance(result, AugmentPlan):
        configs = ", ".join(f"{name} {digest[:12]}" for name, digest in result.configs.items())
        return f"augment plan: {len(result.shards)} shard(s) per augmenter; configurations {configs}"
    if isinstance(result, AugmentReport):
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(result.reasons.items())) or "none"
        return (
            f"augment {result.augmenter}: {result.new_views} views written, {result.reused_views} reused; "
            f"{result.kept} kept, {result.rejected} rejected ({reasons}); translation cache "
            f"{result.cache.hits} hits, {result.cache.misses} misses; {result.shards} shard(s)"
        )
    if isinstance(result, Snapshot):
        how = "created" if result.created else "reused (an identical snapshot existed)"
        return f"pairs snapshot {result.name}: {result.n_pairs} pairs, {how}; lake version {result.lake_version}"
    if isinstance(result, SoupResult):
        weights = ", ".join(f"{model[:12]} x {weight:.2f}" for model, weight in result.weights.items())
        made = "reused" if result.reused else "made"
        return f"soup {result.path}: {made}; {weights}" + ("" if result.exported else " (the recipe's own model alone)")
    if isinstance(result, TrainResult):
        how = "reused" if result.reused else f"trained {result.report.steps} steps" if result.report else "trained"
        step = _selected(result.selected_step)
        return f"train: model {result.model_id[:12]} at {result.path} ({how}); selected step {step}"
    if isinstance(result, list) and result and all(isinstance(row, EvalRow) for row in result):
        scores = [f"{r.model} {r.task} {r.value:.2f} (n={r.n}{', reused' if r.reused else ''})" for r in result]
        return f"evaluate: {'; '.join(scores)}"
    return None


def snapshot_event(recipe: str, snapshot: dict[str, Any]) -> dict[str, Any]:
    """The event a new snapshot emits; a training automation can trigger on it."""
    return {
        "event": SNAPSHOT_EVENT,
        "resource": {"prefect.resource.id": f"viewmill.snapshot.{snapshot['name']}", "viewmill.recipe": recipe},
        "payload": {"snapshot": snapshot["name"], "n_pairs": snapshot["n_pairs"],
                    "content_hash": snapshot["content_hash"]},
    }  # fmt: skip
