"""The BSL demo's corpus (recipes/demo-bsl.yaml: the 2,400-line SNLI slice) as the benchmarks read it
(no lake, no recipe machinery needed). `python benchmarks/demo_data.py N FILE` writes the first N to FILE,
one per line, for machines without ingest's dependencies (a lent GPU box: `VIEWMILL_DEMO_SENTENCES=FILE`)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def demo_sentences(limit: int) -> list[str]:
    """The BSL demo corpus's first `limit` unique sentences (SNLI, detokenised), as that recipe reads them."""
    written = os.environ.get("VIEWMILL_DEMO_SENTENCES")
    if written:
        lines = Path(written).read_text(encoding="utf-8").splitlines()
        if len(lines) < limit:
            raise SystemExit(f"{written} holds {len(lines)} sentences, fewer than the {limit} asked for")
        return lines[:limit]
    from viewmill.augment.ingest.corpus import ingest

    data = ROOT / "recipes" / "data" / "snli"
    result = ingest(
        [data / "s1.dev", data / "s2.dev"], corpus="bench", fmt="senteval", lang="en", detokenize=True,
        min_words=3, max_words=64, limit=limit, run_id="bench",
    )  # fmt: skip
    return result.sentences["text"].to_pylist()


if __name__ == "__main__":
    Path(sys.argv[2]).write_text("\n".join(demo_sentences(int(sys.argv[1]))) + "\n", encoding="utf-8")
