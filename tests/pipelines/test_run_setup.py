"""A run sets up once: `viewmill run` parses the recipe once, makes one run id (the flow keeps
the command line's), reads the corpus whole once (preflight reads a sample) and builds each
augmenter's producer once per process with the lake (lent to the plan, then to each shard in
turn), with and without Prefect. What only the full read finds stops ingest, in preflight's words, before
anything is written."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import ClassVar

import pytest
from typer.testing import CliRunner
from viewmill.augment.data_augmenters import Identity, IdentityProducer
from viewmill.augment.ingest.corpus import CorpusStream, ingest
from viewmill.augment.ingest.readers import CorpusError
from viewmill.pipelines import recipe as recipe_module
from viewmill.pipelines import sweep as sweep_module
from viewmill.pipelines.cli.app import app
from viewmill.pipelines.context import RunContext, recipe_parameter
from viewmill.pipelines.recipe import Recipe, load_recipe
from viewmill.pipelines.stages import producers
from viewmill.pipelines.stages.preflight import SAMPLE_RECORDS, check_corpus_sample
from viewmill.pipelines.sweep import load_sweep
from viewmill.storage.lake import Lake

from tests.conftest import REPO, SENTENCES
from tests.lake_state import lake_state, small_lake

runner = CliRunner()

RECIPE = """
name: setup
corpus: {{format: text, files: [{corpus}], min_words: 3{corpus_extra}}}
augmenters:
  - {{name: same, method: identity}}
  - {{name: same2, method: identity}}
pair: {{view_a: same, view_b: same2, keep_identical: true}}
execution: {{shard_sentences: 8}}
"""


def write_recipe(folder, lines: list[str], corpus_extra: str = "", extra: str = ""):
    corpus = folder / "corpus.txt"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    path = folder / "setup.yaml"
    path.write_text(RECIPE.format(corpus=corpus.name, corpus_extra=corpus_extra) + extra, encoding="utf-8")
    return path


@pytest.fixture
def setup_counts(monkeypatch):
    """Recipe files read and validated, RunContexts made (run id, recipe hash), full corpus
    reads, and identity producers built (per augmenter: "checks" without the lake, "lake" with it)."""
    counts = {"reads": 0, "validations": 0, "contexts": [], "corpus_reads": 0, "builds": Counter()}
    read, validate, init = recipe_module.read_recipe_file, recipe_module.recipe_from_mapping, RunContext.__init__
    full_read, build = CorpusStream.batches, Identity.producer

    def counting_read(*args, **kwargs):
        counts["reads"] += 1
        return read(*args, **kwargs)

    def counting_validate(*args, **kwargs):
        counts["validations"] += 1
        return validate(*args, **kwargs)

    def counting_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        counts["contexts"].append((self.run_id, self.recipe.content_hash()))

    def counting_read_of_corpus(self):
        counts["corpus_reads"] += 1
        return full_read(self)

    def counting_build(self, lake):
        counts["builds"][(self.name, "checks" if lake is None else "lake")] += 1
        return build(self, lake)

    for module in (recipe_module, sweep_module):
        monkeypatch.setattr(module, "read_recipe_file", counting_read)
        monkeypatch.setattr(module, "recipe_from_mapping", counting_validate)
    monkeypatch.setattr(RunContext, "__init__", counting_init)
    monkeypatch.setattr(CorpusStream, "batches", counting_read_of_corpus)
    monkeypatch.setattr(Identity, "producer", counting_build)
    return counts


def _once_each(counts, state) -> str:
    """Check the counts of one run and return its run id (also the `runs` row's)."""
    assert (counts["reads"], counts["validations"]) == (1, 1), "one parse of the recipe"
    run_ids = {run_id for run_id, _ in counts["contexts"]}
    assert len(run_ids) == 1, counts["contexts"]
    assert len({recipe for _, recipe in counts["contexts"]}) == 1, "every context holds the recipe validated first"
    assert counts["corpus_reads"] == 1
    # Three shards per augmenter reuse the plan's producer; preflight's is built without the lake.
    assert counts["builds"] == {(name, kind): 1 for name in ("same", "same2") for kind in ("checks", "lake")}
    assert producers._idle == {}, "the run let go of its producers"
    with Lake(state / "lake", read_only=True) as lake:
        assert lake.arrow("SELECT run_id FROM runs")["run_id"].to_pylist() == list(run_ids)
    return run_ids.pop()


def _printed_run_id(output: str) -> str:
    return re.search(r"run (\S+): recipe ", output).group(1)


def test_a_plain_run_sets_up_once(tmp_path, setup_counts):
    recipe = write_recipe(tmp_path, SENTENCES)
    state = tmp_path / "state"
    result = runner.invoke(app, ["run", str(recipe), "--no-prefect", "--state-dir", str(state)])
    assert result.exit_code == 0, result.output
    assert _once_each(setup_counts, state) == _printed_run_id(result.output)
    assert len(setup_counts["contexts"]) == 1


@pytest.mark.slow
def test_a_prefect_run_keeps_the_command_lines_recipe_and_run_id(tmp_path, setup_counts, prefect_server, monkeypatch):
    from prefect.settings import get_current_settings

    monkeypatch.setenv("PREFECT_API_URL", get_current_settings().api.url)  # the test server, as the user's
    recipe = write_recipe(tmp_path, SENTENCES)
    state = tmp_path / "state"
    result = runner.invoke(app, ["run", str(recipe), "--state-dir", str(state)])
    assert result.exit_code == 0, result.output
    assert _once_each(setup_counts, state) == _printed_run_id(result.output)
    assert len(setup_counts["contexts"]) == 2, "the command line's, and the flow's rebuilt from it"

    recipe, corpus = _bad_line_corpus(tmp_path / "bad", SAMPLE_RECORDS + 5)
    before = lake_state(state / "lake")
    result = runner.invoke(app, ["run", str(recipe), "--state-dir", str(state)])
    out = " ".join(result.output.split())  # with Prefect's "Logging error"s: its handler kept the first invoke's stream
    assert result.exit_code == 2, out
    assert f"error: {corpus}:{SAMPLE_RECORDS + 6}: not valid UTF-8 (byte 0xe9 at column 4)" in out
    _only_the_failed_run_recorded(state / "lake", before, f"{corpus}:{SAMPLE_RECORDS + 6}: not valid UTF-8")


def _only_the_failed_run_recorded(lake: Path, before: dict, error: str) -> None:
    """The lake holds what it held before, and the run's `runs` row (written as it started) says
    it failed with the corpus error."""
    after = lake_state(lake)
    assert after["counts"] == {**before["counts"], "runs": before["counts"]["runs"] + 1}, "no sentence written"
    assert after["snapshots"] == before["snapshots"]
    with Lake(lake, read_only=True) as opened:
        (row,) = opened.arrow("SELECT status, error FROM runs ORDER BY started_at DESC LIMIT 1").to_pylist()
    assert row["status"] == "failed" and row["error"].startswith(f"CorpusError: {error}"), row


def _shards_in_a_worker(jobs: list) -> dict[str, int]:
    """A worker process (as a Dask worker is): runs its shard jobs, counting producer builds."""
    from viewmill.pipelines.stages.augment import augment_shard

    builds: Counter = Counter()
    build = Identity.producer

    def counting(self, lake):
        builds[self.name] += 1
        return build(self, lake)

    Identity.producer = counting  # in this process only
    for job in jobs:
        augment_shard(**job.kwargs())
    return dict(builds)


def test_each_worker_process_builds_a_producer_once_for_all_its_shards(tmp_path):
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    from viewmill.pipelines.stages.augment import augment_plan, shard_jobs
    from viewmill.pipelines.stages.ingest import ingest_stage
    from viewmill.pipelines.state import StatePaths

    ctx = RunContext(load_recipe(write_recipe(tmp_path, SENTENCES)), StatePaths(tmp_path / "state"))
    ingest_stage(ctx)
    jobs = shard_jobs(ctx, augment_plan(ctx))
    producers.release_producers()  # the plan's, in this process
    assert len(jobs) == 6, "two augmenters, three shards each"
    workers = []
    for part in (jobs[0::2], jobs[1::2]):  # each worker gets shards of both augmenters
        with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as worker:
            workers.append(worker.submit(_shards_in_a_worker, part).result())
    assert workers == [{"same": 1, "same2": 1}] * 2
    with Lake(ctx.state.lake, read_only=True) as lake:
        assert lake.scalar("SELECT count(*) FROM views") == 40


def test_a_producer_is_lent_to_one_user_at_a_time_closed_when_given_back_and_kept_for_its_run(tmp_path, monkeypatch):
    closed: Counter = Counter()
    monkeypatch.setattr(IdentityProducer, "close", lambda self: closed.update([id(self)]))
    spec = Identity(name="same")
    with Lake(small_lake(tmp_path / "lake"), read_only=True) as lake:
        lend = producers.lent_producer
        with lend(spec, lake, "run-1") as first, lend(spec, lake, "run-1") as beside:  # two shards at once
            assert beside._producer is not first._producer
        with lend(spec, lake, "run-1") as again:
            assert again._producer in (first._producer, beside._producer) and closed[id(again._producer)] == 1
        with lend(spec, lake, "run-2") as later:
            assert later._producer not in (first._producer, beside._producer), "built anew for another run"
        assert producers.release_producers() == 1, "run-2's; run-1's were let go when run-2 began"

        class OneUse(Identity):  # its close() ends it for good
            reusable_producer: ClassVar[bool] = False

        class Reusable(Identity):  # a plugin's, outside viewmill, that declares it may be reused
            pass

        with lend(OneUse(name="same"), lake, "run-3") as built:
            assert isinstance(built, IdentityProducer), "built for this use, not lent"
        with lend(Reusable(name="same"), lake, "run-3") as plugin:
            assert isinstance(plugin, producers._Lent)
    assert closed[id(built)] == 1 and producers.release_producers() == 1


def _bad_line_corpus(folder, rows: int):
    """A recipe whose corpus has `rows` good lines, then one that is not UTF-8."""
    folder.mkdir(exist_ok=True)
    lines = [f"Sentence number {i} is a good one." for i in range(rows)]
    recipe = write_recipe(folder, lines)
    corpus = folder / "corpus.txt"
    with corpus.open("ab") as handle:
        handle.write(b"caf\xe9 au lait for everyone\n")
    return recipe, corpus


def test_a_bad_line_past_the_sample_stops_ingest_with_its_file_and_row_and_writes_nothing(tmp_path, setup_counts):
    recipe, corpus = _bad_line_corpus(tmp_path / "big", SAMPLE_RECORDS + 5)
    state = tmp_path / "state"
    small_lake(state / "lake")
    before = lake_state(state / "lake")
    check_corpus_sample(load_recipe(recipe))  # preflight's sample ends before the bad line
    result = runner.invoke(app, ["run", str(recipe), "--no-prefect", "--state-dir", str(state)])
    out = " ".join(result.output.split())
    assert result.exit_code == 2 and "Traceback" not in out, out
    assert (
        f"error: {corpus}:{SAMPLE_RECORDS + 6}: not valid UTF-8 (byte 0xe9 at column 4); re-encode the file as "
        "UTF-8, e.g. iconv -f latin1 -t utf-8 (or set corpus.on_error: skip to skip and count such records)"
    ) in out
    assert setup_counts["corpus_reads"] == 1
    _only_the_failed_run_recorded(state / "lake", before, f"{corpus}:{SAMPLE_RECORDS + 6}: not valid UTF-8")


def test_preflight_words_a_bad_line_in_its_sample_as_ingest_does(tmp_path):
    recipe = load_recipe(_bad_line_corpus(tmp_path, 3)[0])
    with pytest.raises(CorpusError) as checked:
        check_corpus_sample(recipe)
    spec = recipe.corpus
    with pytest.raises(CorpusError) as read:
        ingest(spec.files, corpus="c", fmt="text", lang="en", detokenize=False, min_words=3, max_words=64,
               limit=None, run_id="r")  # fmt: skip
    assert str(checked.value) == str(read.value) and ":4: not valid UTF-8" in str(read.value)
    # Past corpus.limit ingest never reads the line, and preflight does not refuse it; skipped, it is counted.
    assert check_corpus_sample(recipe.model_copy(update={"corpus": spec.model_copy(update={"limit": 3})})) == 4
    assert check_corpus_sample(recipe.model_copy(update={"corpus": spec.model_copy(update={"on_error": "skip"})})) == 4


def test_preflight_reads_a_sample_of_each_source(tmp_path):
    recipe = load_recipe(_bad_line_corpus(tmp_path, 50)[0])
    assert check_corpus_sample(recipe, records=7) == 7


def test_a_sweep_reads_its_recipe_once_and_validates_each_configuration_as_load_recipe_does(tmp_path, setup_counts):
    sweep = """
train: {encoder: embedded:all-MiniLM-L6-v2, steps: 60}
evaluate: {tasks: [{name: dev, format: stsb, path: sts.csv}]}
sweep: {select_on: dev, grid: {train.steps: [50, 70]}, configs: [{label: other, set: {train.batch_size: 8}}]}
"""
    path = write_recipe(tmp_path, SENTENCES, extra=sweep)
    recipes = load_sweep(path, ["train.batch_size=4"])
    assert setup_counts["reads"] == 1 and setup_counts["validations"] == 4
    overrides = [["train.steps=50"], ["train.steps=70"], ["train.batch_size=8"]]
    expected = [load_recipe(path, ["train.batch_size=4", *more]) for more in overrides]
    assert [r.content_hash() for r in recipes.configs] == [r.content_hash() for r in expected]
    assert recipes.base.content_hash() == load_recipe(path, ["train.batch_size=4"]).content_hash()


RECIPES = sorted(p for p in (REPO / "recipes").glob("*.yaml") if "\ncorpus:" in p.read_text(encoding="utf-8"))


@pytest.mark.parametrize("path", RECIPES, ids=[p.name for p in RECIPES])
def test_a_recipe_given_to_a_flow_as_json_is_the_same_recipe_there(path):
    """The flow parameter (Prefect stores it as JSON, a retry reads it back) validates to the
    recipe the command line validated; a full dump would not always (bsl-wmt19's would be refused)."""
    from viewmill.pipelines.orchestration.flows import recipe_flow

    recipe = load_recipe(path)
    stored = recipe_flow.serialize_parameters({"recipe_path": str(path), "recipe": recipe_parameter(recipe)})
    again = Recipe.model_validate(stored["recipe"])
    assert again == recipe and again.content_hash() == recipe.content_hash()
