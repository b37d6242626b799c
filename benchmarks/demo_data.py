"""The BSL demo's corpus (recipes/demo-bsl.yaml: the 2,400-line SNLI slice) as the benchmarks read it
(no lake, no recipe machinery needed)."""

from __future__ import annotations

from pathlib import Path

from viewmill.augment.ingest.corpus import ingest

ROOT = Path(__file__).resolve().parents[1]


def demo_sentences(limit: int) -> list[str]:
    """The BSL demo corpus's first `limit` unique sentences (SNLI, detokenised), as that recipe reads them."""
    data = ROOT / "recipes" / "data" / "snli"
    result = ingest(
        [data / "s1.dev", data / "s2.dev"], corpus="bench", fmt="senteval", lang="en", detokenize=True,
        min_words=3, max_words=64, limit=limit, run_id="bench",
    )  # fmt: skip
    return result.sentences["text"].to_pylist()
