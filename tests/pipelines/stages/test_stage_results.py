"""The stages' typed results keep the run summary's and the `runs` record's JSON as it was
(existing lakes and scripts read those keys), and a shard job calls augment_shard with the
plain values its Prefect task caches on."""

import inspect
import json

from viewmill.augment.augmenters import AUGMENTERS
from viewmill.augment.cache import CacheStats
from viewmill.augment.ingest.corpus import IngestStats
from viewmill.augment.quality import FilterSpec
from viewmill.augment.views import AugmentReport, Shard
from viewmill.pipelines.run_record import RunSummary
from viewmill.pipelines.stages.augment import ShardJob, augment_shard
from viewmill.pipelines.stages.evaluate import EvalRow
from viewmill.pipelines.stages.ingest import IngestReport
from viewmill.pipelines.stages.train import TrainResult
from viewmill.storage.ids import canonical_json
from viewmill.storage.snapshots import Snapshot
from viewmill.train.loop import TrainReport

from viewmill.settings import Settings

STATS = IngestStats(lines=7, kept=5, duplicates=1, blank=1, malformed_examples=["x:3: bad"], rejected={"binary": 0})
INGEST = IngestReport("tiny", "v1", sentences=5, new_sentences=5, new_nli_pairs=0, stats=STATS)
AUGMENT = AugmentReport("bt", "c1", sentences=5, new_views=5, kept=4, rejected=1, reasons={"chrf": 1},
                        cache=CacheStats(hits=2, misses=3), shards=1, workers=["h:1"])  # fmt: skip
SNAPSHOT = Snapshot("tiny-abc", 4, "h", 3, True)
REPORT = TrainReport(steps=4, pairs=4, first_loss=1.5, last_loss=1.0, seconds=2.0, model_dir="m", selected_step=4)


def test_a_full_summary_has_the_keys_it_always_had():
    summary = RunSummary("r1", "tiny", {"ingest": 0.5}, ingest=INGEST, augment={"bt": AUGMENT}, snapshot=SNAPSHOT,
                         train=TrainResult("id", "m", reused=False, selected_step=4, report=REPORT),
                         evals=[EvalRow("trained", "sts", 70.0, 4, "all", reused=False)]).as_dict()  # fmt: skip
    assert list(summary) == ["run_id", "recipe", "timings", "ingest", "augment", "snapshot", "train", "evals"]
    assert summary["ingest"] == {
        "corpus": "tiny", "corpus_version": "v1", "sentences": 5, "new_sentences": 5, "new_nli_pairs": 0,
        "lines": 7, "kept": 5, "duplicates": 1, "too_short": 0, "too_long": 0, "blank": 1, "malformed": 0,
        "malformed_examples": ["x:3: bad"], "nli_pairs": 0, "rejected": {"binary": 0}, "per_file": {},
    }  # fmt: skip
    assert summary["augment"]["bt"]["cache"] == {"hits": 2, "misses": 3}
    assert summary["snapshot"] == {"name": "tiny-abc", "n_pairs": 4, "content_hash": "h", "lake_version": 3,
                                   "created": True}  # fmt: skip
    assert summary["train"] == {"model_id": "id", "path": "m", "reused": False, "steps": 4, "pairs": 4,
                                "first_loss": 1.5, "last_loss": 1.0, "seconds": 2.0, "model_dir": "m",
                                "dev_evals": [], "dev_task_evals": {}, "best_step": None,
                                "selected_step": 4, "first_step_s": None,
                                "median_step_s": None}  # fmt: skip
    assert summary["evals"] == [{"model": "trained", "task": "sts", "value": 70.0, "n": 4, "convention": "all",
                                 "reused": False, "same_as": None}]  # fmt: skip
    json.dumps(summary)  # a flow's result: plain JSON values only


def test_a_reused_model_reports_only_its_selected_step():
    reused = TrainResult("id", "m", reused=True, selected_step=0).as_dict()
    assert reused == {"model_id": "id", "path": "m", "reused": True, "selected_step": 0}


def test_a_summary_holds_only_the_stages_that_ran():
    assert RunSummary("r1", "tiny").as_dict() == {"run_id": "r1", "recipe": "tiny", "timings": {}}
    assert RunSummary("r1", "tiny").counts() == {}


def test_the_stored_counts_json_is_unchanged():
    summary = RunSummary("r1", "tiny", ingest=INGEST, augment={"bt": AUGMENT}, snapshot=SNAPSHOT)
    assert canonical_json(summary.counts()) == (
        '{"ingest":{"blank":1,"duplicates":1,"lines":7,"malformed":0,"malformed_examples":["x:3: bad"],'
        '"nli_pairs":0,"rejected":{"binary":0},"too_long":0,"too_short":0},"pairs":4,"sentences":5,'
        '"views.bt":{"cache":{"hits":2,"misses":3},"kept":4,"new_views":5,"reasons":{"chrf":1},"rejected":1}}'
    )


def test_a_shard_job_passes_augment_shard_plain_values():
    spec = AUGMENTERS.get("identity")(name="same")
    job = ShardJob("/lake", "tiny", spec, FilterSpec(), Shard(1, 3), "c1", "s1", "e1", "r1", 64, Settings())
    kwargs = job.kwargs()
    assert list(kwargs) == list(inspect.signature(augment_shard).parameters)
    assert kwargs["shard"] == {"index": 1, "count": 3} and kwargs["spec"] is spec and kwargs["chunk_sentences"] == 64
