"""`viewmill plan`: a small corpus measured and estimated, checked against a real run of the same
recipe, with the run's lake read and never written."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner
from viewmill.pipelines.cli.app import app
from viewmill.pipelines.cli.plan import render_plan
from viewmill.pipelines.context import RunContext
from viewmill.pipelines.plan import NO_GPU, plan_recipe, size_corpus
from viewmill.pipelines.recipe import load_recipe
from viewmill.pipelines.state import StatePaths

from tests.conftest import needs_apertium, write_sts_fixture
from tests.lake_state import lake_state
from viewmill.allocator import allocator_label
from viewmill.settings import Settings

runner = CliRunner()
STAGES = ["preflight", "ingest", "augment", "pair", "train", "evaluate"]
SUBJECTS = ["A man", "The woman", "Two dogs", "A child", "The old cat", "People", "A girl", "The chef"]
VERBS = ["is playing", "is eating", "is sitting", "is walking", "is reading", "is cooking", "is singing", "is running"]
PLACES = ["in the park", "on the street", "at home", "near the river", "in the kitchen"]


def write_plan_recipe(folder: Path, model: Path) -> Path:
    """200 distinct sentences, the identity view and one Apertium round trip, the tiny model."""
    lines = [f"{s} {v} {p}." for s in SUBJECTS for v in VERBS for p in PLACES][:200]
    (folder / "corpus.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    write_sts_fixture(folder / "sts.csv")
    recipe = folder / "plan.yaml"
    recipe.write_text(
        f"""
name: plantiny
corpus: {{format: text, files: [corpus.txt], min_words: 3}}
augmenters:
  - {{name: same, method: identity}}
  - {{name: bt_es, method: backtranslation, engine: apertium, path: [en, es, en]}}
filters: {{min_chrf: 0, max_length_ratio: 3.0}}
pair: {{view_a: same, view_b: bt_es}}
train: {{encoder: {model}, steps: 4, head_warmup_steps: 1, batch_size: 8, encoder_lr: 1.0e-3}}
evaluate:
  tasks: [{{name: sts-fixture, format: stsb, path: sts.csv}}]
""",
        encoding="utf-8",
    )
    return recipe


def file_hashes(root: Path) -> dict[str, str]:
    return {
        path.relative_to(root).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


@pytest.fixture(scope="module")
def planned_then_run(tmp_path_factory, tiny_model):
    """A plan (JSON, 100 of the 200 sentences sampled) on a state with no lake, then a real
    `viewmill run --no-prefect` of the recipe, timed."""
    folder = tmp_path_factory.mktemp("plan")
    recipe, state = write_plan_recipe(folder, tiny_model), folder / "state"
    first = runner.invoke(app, ["plan", str(recipe), "--state-dir", str(state), "--format", "json",
                                "--sample", "100", "--dask-workers", "4"])  # fmt: skip
    assert first.exit_code == 0, first.output
    created = state.exists()
    t0 = time.perf_counter()
    ran = runner.invoke(app, ["run", str(recipe), "--no-prefect", "--state-dir", str(state)])
    assert ran.exit_code == 0, ran.output
    return recipe, state, json.loads(first.stdout), created, time.perf_counter() - t0


@needs_apertium
def test_plan_measures_every_stage_and_writes_no_lake(planned_then_run):
    _, _, plan, created, _ = planned_then_run
    assert not created  # no lake, no state folder: the sample was measured in a scratch lake
    assert (plan["recipe"], plan["sentences"], plan["sample"], plan["workers"]) == ("plantiny", 200, 100, 4)
    assert plan["allocator"] == allocator_label()  # the memory figures' allocator (this process's)
    assert [s["stage"] for s in plan["stages"]] == STAGES
    rows = {s["stage"]: s["rows"] for s in plan["stages"]}
    assert rows["ingest"] == 200 and rows["augment"] == 400 and rows["train"] == 32
    same, bt = plan["augmenters"]
    assert (same["name"], same["cache_hits"], same["views_present"]) == ("same", None, 0.0)
    assert (bt["name"], bt["engine"], bt["cache_hits"], bt["views_present"]) == ("bt_es", "apertium", 0.0, 0.0)
    assert bt["engine_s"] > 0 and bt["sentences"] == 100
    for stage in [*plan["stages"], plan["total"]]:
        assert stage["seconds"] > 0 and stage["peak_rss"] > 0, stage
        assert stage["workers_seconds"] <= stage["seconds"] + 1e-9
        if not torch.cuda.is_available():
            assert stage["gpu_seconds"] == NO_GPU
    assert plan["total"]["seconds"] == pytest.approx(sum(s["seconds"] for s in plan["stages"]))
    train = next(s for s in plan["stages"] if s["stage"] == "train")
    assert "does not scale with Dask workers" in train["note"] and train["workers_seconds"] == train["seconds"]


@needs_apertium
def test_the_estimate_is_within_a_factor_of_3_of_the_real_run(planned_then_run):
    _, _, plan, _, wall = planned_then_run
    assert wall / 3 <= plan["total"]["seconds"] <= wall * 3, (plan["total"]["seconds"], wall)


@needs_apertium
def test_a_plan_after_the_run_counts_its_cache_and_leaves_the_lake_alone(planned_then_run, capsys):
    recipe, state, first, _, _ = planned_then_run
    before, hashes = lake_state(state / "lake"), file_hashes(state)
    again = plan_recipe(load_recipe(recipe), StatePaths(state), Settings(), sample=100, workers=1)
    assert lake_state(state / "lake") == before and file_hashes(state) == hashes
    same, bt = again.augmenters
    assert (bt.cache_hits, bt.views_present, same.views_present) == (1.0, 1.0, 1.0)
    augment = {s.stage: s.seconds for s in again.stages}["augment"]
    earlier = next(s["seconds"] for s in first["stages"] if s["stage"] == "augment")
    assert augment < earlier / 10, (augment, earlier)  # nothing left to augment
    render_plan(again)
    table = capsys.readouterr().out
    assert "recipe plantiny: 200 sentences, counted" in table and "measured on 100" in table
    assert f"memory measured on {allocator_label()}" in table
    assert all(f"│ {stage}" in table for stage in [*STAGES, "total"])
    assert [line.count("100%") for line in table.splitlines() if line.startswith("│ bt_es")] == [2]


def test_bad_input_exits_2_before_anything_is_measured(tmp_path, tiny_model):
    missing = runner.invoke(app, ["plan", str(tmp_path / "nope.yaml"), "--state-dir", str(tmp_path / "s")])
    assert missing.exit_code == 2 and "recipe not found" in missing.output
    recipe = write_plan_recipe(tmp_path, tiny_model)
    (tmp_path / "corpus.txt").unlink()
    gone = runner.invoke(app, ["plan", str(recipe), "--state-dir", str(tmp_path / "s")])
    assert gone.exit_code == 2, gone.output
    assert (
        f"corpus file not found: {tmp_path / 'corpus.txt'} (fix the path in the recipe's corpus.files)" in gone.output
    )
    small = runner.invoke(app, ["plan", str(recipe), "--sample", "0"])
    assert small.exit_code == 2 and "--sample" in small.output
    assert not (tmp_path / "s").exists()


def test_a_corpus_past_the_size_limit_is_estimated_from_a_prefix_and_says_so(tmp_path, tiny_model):
    recipe = write_plan_recipe(tmp_path, tiny_model)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(corpus.read_text(encoding="utf-8") * 2, encoding="utf-8")  # every line twice: half kept
    ctx = RunContext(load_recipe(recipe), StatePaths(tmp_path / "s"))
    assert size_corpus(ctx) == (200, "counted (every source streamed through ingest's filters)")
    estimated, how = size_corpus(ctx, estimate_bytes=0)
    assert estimated == 200 and how == "estimated from 0.0 GiB of sources and a 400-record prefix"
    assert not (tmp_path / "s").exists()


def test_the_lakes_commit_cost_is_spread_over_commits_of_the_runs_own_size():
    from viewmill.pipelines.plan import lake_commits_s
    from viewmill.pipelines.plan_measure import AugmenterMeasure

    def measure(**lake) -> AugmenterMeasure:
        return AugmenterMeasure("a", "e", 300, 0.0, view_s=0.0001, engine_s=0.0, peak_rss=0, **lake)

    # Sized by time: 0.5 s of lake a commit, 0.1 ms a sentence -> 8 commits for 100k (commit_sizes'
    # own test); with the translations committed alongside each views commit.
    both = measure(view_commit_s=0.3, translation_commit_s=0.2)
    assert lake_commits_s(both, 100_000, 1.0, 0.0001, shards=1) == pytest.approx(8 * 0.5)
    # Two shards: the second starts at the 50,000 the first reached, so 2 commits more.
    assert lake_commits_s(both, 200_000, 1.0, 0.0001, shards=2) == pytest.approx(10 * 0.5)
    cached = lake_commits_s(both, 100_000, 0.0, 0.0001, shards=1)  # nothing new: no translation commits
    assert cached < 8 * 0.5 and cached > 0
    # A batch-variant engine: fixed views commits of 512 and translations per 256.
    neural = measure(view_commit_s=0.3, translation_commit_s=0.2, fixed_commit=512, translation_chunk=256)
    assert lake_commits_s(neural, 1024, 0.5, 0.01, shards=1) == pytest.approx(2 * 0.3 + 2 * 0.2)


def test_the_filters_share_of_a_view_is_taken_at_the_runs_call_size():
    """The sample's few hundred sentences make small encoder calls where the run's chunk makes
    thousands: an encoder with a cost per call is faster per text in the larger ones."""
    from viewmill.pipelines.plan_measure import AugmenterMeasure, _at_run_call_size, call_size_speedup

    calls: list[list[str]] = []

    def embed(texts: list[str]) -> None:  # 20 ms a call, whatever its size
        calls.append(texts)
        time.sleep(0.02)

    assert call_size_speedup(embed, ["a b c"], 100, 1000) > 3 and [len(c) for c in calls] == [1000] + [100] * 10
    assert {len(t.split()[-1]) for c in calls for t in c} == {7}  # the same tokens in both
    assert call_size_speedup(embed, ["a b c"], 300, 300) == 1.0  # the sample is the chunk: nothing to scale
    assert call_size_speedup(lambda texts: time.sleep(0.001 * len(texts) ** 1.2), ["a"], 10, 100) == 1.0

    def measure(fixed: int | None, meaning_s: float, call_texts: float) -> AugmenterMeasure:
        return AugmenterMeasure("a", "e", 300, 0.0, view_s=0.01, engine_s=0.0, peak_rss=0, fixed_commit=fixed,
                                meaning_s=meaning_s, meaning_call_texts=call_texts)  # fmt: skip

    first, second = measure(2048, 0.008, 500.0), measure(2048, 0.004, 300.0)
    unfiltered, adaptive = measure(2048, 0.0, 0.0), measure(None, 0.008, 400.0)
    calls.clear()
    _at_run_call_size([first, second, unfiltered, adaptive], embed, ["a b c", "d e"], shard=5000)
    # Once for the recipe: the filtered augmenters' average call (400) scaled by 2,048 / 300.
    assert [len(c) for c in calls] == [2731] + [400] * 6 + [331]
    speedup = first.meaning_call_speedup
    assert speedup > 3 and second.meaning_call_speedup == speedup
    assert first.view_s == pytest.approx(0.01 - 0.008 * (1 - 1 / speedup))
    assert unfiltered.view_s == adaptive.view_s == 0.01 and unfiltered.meaning_call_speedup == 1.0
    calls.clear()
    _at_run_call_size([measure(2048, 0.008, 3000.0)], embed, ["a"], shard=5000)
    assert len(calls[0]) == 4096  # at most MAX_MEASURED_CALL texts each way
    calls.clear()
    shard_bound = measure(2048, 0.008, 300.0)
    _at_run_call_size([shard_bound], embed, ["a"], shard=200)  # the run's calls are a shard's at most
    assert calls == [] and shard_bound.view_s == 0.01


def test_the_pair_and_train_stages_memory_grows_with_the_pairs_they_hold():
    # The plan once gave every stage its sample's peak: 2.43 GiB for a 100k run that peaked at
    # 3.76, and nothing of faiss's 1.7 GiB index at 1M pairs.
    from types import SimpleNamespace as Fake

    from viewmill.pipelines.plan import Measures, pair_estimate, train_estimate
    from viewmill.pipelines.plan_measure import EncodeMeasure
    from viewmill.train.mining import MinedNegatives, MiningShape
    from viewmill.train.step_timing import TrainMeasure

    gib, watched = 2**30, Fake(seconds=1.0, peak=2**30)
    sample = MiningShape(texts=300, candidates=200, anchors=200, dims=384, text_chars=40.0)
    found = Measures(watched, watched, watched, 100, [], watched, 200,
                     {"cpu": TrainMeasure("cpu", 1.0, 0.1, 1.0, gib)}, {"cpu": EncodeMeasure("cpu", 1.0, 100.0, gib)},
                     pair_bytes=500.0, mining=sample)  # fmt: skip
    mined = MinedNegatives(source="mined")
    recipe = Fake(pair=Fake(negatives=mined), train=Fake(steps=10, batch_size=8, eval_every=0, dev_tasks=[]))
    pair = pair_estimate(recipe, found, scale=5_000.0)  # 1M pairs
    embeddings, faiss_index = 1_500_000 * 1_536, 1_000_000 * (1_536 + 272)
    layout = 3_000_000 * (57 + 40) + 2_000_000 * 208 + 8 * 4_000_000  # texts in Python, exclusion tensors
    mined_at_1m = layout + embeddings + faiss_index + 1_000_000 * 12  # and ranked windows of one
    mined_on_sample = mined.memory_bytes(sample)  # the exact search's block, mostly
    assert pair.rows == 1_000_000 and pair.peak_rss == gib + 999_800 * 500 + mined_at_1m - mined_on_sample
    assert "faiss search over 1,000,000 candidates" in pair.note
    assert "embeddings kept in the lake: up to 2.15 GiB" in pair.note  # 1.5M texts x 384 float32
    assert train_estimate(recipe, found, pair.rows).peak_rss == gib + 999_800 * 500  # the snapshot in Arrow
    recipe.pair.negatives = None  # other negatives (or none): only the pairs grow
    assert pair_estimate(recipe, found, scale=5_000.0).peak_rss == gib + 999_800 * 500
