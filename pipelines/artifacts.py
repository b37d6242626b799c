"""What a run shows in Prefect's UI: counts per augmenter and status, a sample of round
trips, the evaluation table; and the event that says a new pairs snapshot exists."""

from __future__ import annotations

from typing import Any

from viewmill.storage.lake import Lake

SNAPSHOT_EVENT = "viewmill.snapshot.created"


def view_counts(lake: Lake, corpus: str) -> list[dict[str, Any]]:
    return lake.arrow(
        """
        SELECT v.augmenter, v.status, coalesce(v.reject_reason, '') AS reason, count(*) AS views
        FROM views v JOIN sentences s ON s.sentence_id = v.sentence_id AND s.corpus = ?
        GROUP BY ALL ORDER BY ALL
        """,
        [corpus],
    ).to_pylist()


def round_trip_sample(lake: Lake, corpus: str, n: int = 10) -> str:
    """A Markdown table of n sources with their views (a fixed, repeatable sample)."""
    rows = lake.arrow(
        """
        SELECT s.text AS source, v.path, v.text AS view, v.status, round(v.quality.chrf_to_source, 1) AS chrf
        FROM views v JOIN sentences s ON s.sentence_id = v.sentence_id AND s.corpus = ?
        WHERE v.sentence_id IN (SELECT sentence_id FROM sentences WHERE corpus = ? ORDER BY sentence_id LIMIT ?)
        ORDER BY v.sentence_id, v.path
        """,
        [corpus, corpus, n],
    ).to_pylist()
    lines = ["| source | path | view | status | chrF |", "|---|---|---|---|---|"]
    for r in rows:
        cells = [r["source"], r["path"], r["view"], r["status"], "" if r["chrf"] is None else f"{r['chrf']}"]
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def eval_table(evals: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"model": e["model"], "task": e["task"], "spearman_x100": round(e["value"], 2), "pairs": e["n"]}
            for e in evals]  # fmt: skip


def snapshot_event(recipe: str, snapshot: dict[str, Any]) -> dict[str, Any]:
    """The event a new snapshot emits; a training automation can trigger on it."""
    return {
        "event": SNAPSHOT_EVENT,
        "resource": {"prefect.resource.id": f"viewmill.snapshot.{snapshot['name']}", "viewmill.recipe": recipe},
        "payload": {"snapshot": snapshot["name"], "n_pairs": snapshot["n_pairs"],
                    "content_hash": snapshot["content_hash"]},
    }  # fmt: skip
