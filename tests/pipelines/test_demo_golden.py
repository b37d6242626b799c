"""The demo's first three stages pinned: what they count and the pairs snapshot they make.

Recorded at main 40eae17, before the objective/augmenter/package refactors of issue 24;
a refactor that changes either figure changed behaviour, not just where code lives.
If a deliberate change (a new filter, an Apertium upgrade) moves them, record the new
figures here with the reason.
"""

import json
from pathlib import Path

from viewmill.pipelines.recipe import load_recipe
from viewmill.pipelines.run import RunContext, run_recipe
from viewmill.pipelines.state import StatePaths
from viewmill.storage.lake import Lake

from tests.conftest import needs_apertium

DEMO = Path(__file__).resolve().parents[2] / "recipes" / "demo.yaml"
COUNTS = {
    "ingest": {
        "blank": 0, "duplicates": 233, "lines": 353, "malformed": 0, "malformed_examples": [], "nli_pairs": 0,
        "rejected": {}, "too_long": 0, "too_short": 0,
    },
    "pairs": 119,
    "sentences": 120,
    "views.bt_ca": {"cache": {"hits": 0, "misses": 240}, "kept": 120, "new_views": 120, "reasons": {}, "rejected": 0},
    "views.bt_es": {
        "cache": {"hits": 0, "misses": 240}, "kept": 119, "new_views": 120, "reasons": {"chrf<20": 1}, "rejected": 1,
    },
}  # fmt: skip
SNAPSHOT = ("demo-6900d257ebf1", "6900d257ebf1221e34f9fdbce2b1c096")


@needs_apertium
def test_the_demos_counts_and_snapshot_hash_are_unchanged(tmp_path):
    state = StatePaths(tmp_path / "state")
    run_recipe(RunContext(load_recipe(DEMO, ["corpus.limit=120"]), state), train=False, evaluate=False)
    with Lake(state.lake, read_only=True) as lake:
        counts = json.loads(lake.scalar("SELECT counts FROM runs"))
        snapshot = lake.con.execute("SELECT snapshot, content_hash FROM snapshots").fetchall()
    assert counts == COUNTS
    assert snapshot == [SNAPSHOT]
