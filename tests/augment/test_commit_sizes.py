from typing import ClassVar

import pyarrow as pa
import pytest
import viewmill.augment.views as views_module
from viewmill.augment.cache import BATCH_VARIANT_CHUNK, GPU_BATCH_VARIANT_CHUNK, batch_variant_chunk
from viewmill.augment.commit_sizes import (
    GPU_FIXED_SENTENCES,
    MAX_LAKE_SHARE,
    MAX_SENTENCES,
    MEANING_FIXED_SENTENCES,
    MIN_SENTENCES,
    CommitSizes,
    commits_for,
    on_gpu,
)
from viewmill.augment.data_augmenters import Identity
from viewmill.augment.meaning import MeaningJudge
from viewmill.augment.quality import FilterSpec
from viewmill.augment.replacement_augmenters import Synonym
from viewmill.augment.translation_augmenters import BackTranslation, Forward
from viewmill.augment.views import Shard, make_shard_views
from viewmill.storage.ids import fingerprint, sentence_id, text_hash
from viewmill.storage.lake import Lake
from viewmill.storage.lake_setup import CATALOG_NAME
from viewmill.storage.schema import SENTENCES

from tests.plugins import forget_plugin, install_plugin


class FakeClock:
    """Each reading `step` seconds after the last: work of a fixed duration, no sleeping."""

    def __init__(self, step: float):
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def _sizes(sizes: CommitSizes, items: int) -> list[int]:
    return [len(chunk) for chunk in sizes.chunks(list(range(items)))]


def test_a_set_chunk_size_is_kept_however_fast_the_work():
    assert _sizes(CommitSizes(6, clock=FakeClock(0.0)), 20) == [6, 6, 6, 2]


def test_unset_the_commit_grows_by_doubling_while_work_is_fast_up_to_the_ceiling():
    sizes = _sizes(CommitSizes(clock=FakeClock(0.0)), 300_000)
    assert sizes[:8] == [512, 1024, 2048, 4096, 8192, 16384, 32768, 65536]
    assert max(sizes) == MAX_SENTENCES and sum(sizes) == 300_000


def test_unset_a_commit_holds_about_a_second_of_work_and_never_less_than_the_floor():
    sizes = CommitSizes()
    sizes.record(512, 0.25)  # 2,048 sentences a second: doubling allows only 1,024
    assert sizes.size == 1024
    sizes.record(1024, 0.5)  # 2,048 a second
    assert sizes.size == 2048
    sizes.record(2048, 2.0)  # slower now: a second is 1,024 sentences
    assert sizes.size == 1024
    sizes.record(1024, 60.0)  # slow translation: one floor-sized chunk
    assert sizes.size == MIN_SENTENCES


def test_a_commit_grows_while_the_lakes_share_of_it_is_over_its_bound():
    sizes = CommitSizes()
    sizes.record(1024, 1.0, lake_s=0.05)  # 5% in the lake: a second of work, as without a lake
    assert sizes.size == 1024
    sizes.record(1024, 1.0, lake_s=0.5)  # half in the lake (a lake of many files): 5x the work
    assert sizes.size == 2048  # ... at most doubling
    sizes.record(2048, 1.1, lake_s=0.3)  # the lake's 0.3 s wants 0.8 s x 0.3/0.1 of work: 7,680
    assert sizes.size == 4096


def test_a_lake_whose_commits_grow_with_its_files_keeps_its_file_count_sublinear():
    # Each commit's lake work grows with the files already written (the cache lookup and the
    # catalog's read): sized by time alone, the commits of n sentences stay n/1,000.
    work_per_sentence, per_file = 0.001, 0.002

    def files_for(sentences: int, rule: bool) -> int:
        sizes, done, files = CommitSizes(), 0, 0
        while done < sentences:
            chunk = min(sizes.size, sentences - done)
            lake_s = 0.05 + per_file * files
            sizes.record(chunk, chunk * work_per_sentence + lake_s, lake_s if rule else 0.0)
            done, files = done + chunk, files + 1
        return files

    assert files_for(1_000_000, rule=False) >= 900
    small, large = files_for(100_000, rule=True), files_for(1_000_000, rule=True)
    assert large < 300 and large < 4 * small  # sqrt-like, not 10x


def test_commits_for_follows_the_rule_and_a_fixed_size():
    assert commits_for(2000, 0.0, 0.0, fixed=512) == 4
    assert commits_for(300, 0.001, 0.1) == 1
    # 0.5 s of lake a commit against 0.1 ms a sentence: doubling from 512 to 32,768 (65,024
    # sentences in 7 commits), then the 50,000 that put the lake at 10%: one more.
    assert commits_for(100_000, 0.0001, 0.5) == 8
    assert MAX_LAKE_SHARE == 0.1


def test_a_chunk_size_below_one_is_refused():
    with pytest.raises(ValueError, match="at least 1"):
        CommitSizes(0)


@pytest.mark.parametrize(("step", "commits"), [(0.0, [512, 1536, 2000]), (10.0, [512, 1024, 1536, 2000])])
def test_views_commit_adaptively_when_no_chunk_size_is_given(tmp_path, monkeypatch, step, commits):
    texts = [f"sentence number {i}." for i in range(2000)]
    rows = [{"corpus": "c", "sentence_id": sentence_id(t), "text": t, "lang": "en"} for t in texts]
    clock = FakeClock(step)
    monkeypatch.setattr(views_module, "CommitSizes", lambda fixed, **_: CommitSizes(fixed, clock=clock))
    progress: list[int] = []  # sentences done after each commit
    with Lake(tmp_path / "lake") as lake:
        lake.append("sentences", pa.Table.from_pylist(rows, schema=SENTENCES))
        spec, filters = Identity(name="same"), FilterSpec()
        report = make_shard_views(lake, "c", spec, filters, run_id="r", on_progress=lambda n, _t: progress.append(n))
        files = lake.scalar("SELECT count(*) FROM ducklake_list_files(?, 'views')", [CATALOG_NAME])
    assert report.new_views == 2000 and progress == [0, *commits]
    assert files == len(commits)  # one Parquet file a commit


@pytest.mark.parametrize(
    ("spec", "meaning", "fixed"),
    [
        (Identity(name="same"), None, None),  # the same views however batched: sized by time
        (Identity(name="same"), {"min_cosine": 0.1}, MEANING_FIXED_SENTENCES),  # the filter embeds per chunk
        (Synonym(name="syn"), None, None),  # seeded per sentence
        (BackTranslation(name="bt", path=["en", "es", "en"]), None, None),  # Apertium: rule-based
        (BackTranslation(name="bt", path=["en", "es", "en"], engine="hf", model="m"), None, MIN_SENTENCES),
        (BackTranslation(name="bt", path=["en", "es", "en"], engine="hf", model="m"), {}, MEANING_FIXED_SENTENCES),
        # On a GPU, several of its larger batches a chunk (512 left an H200 launch-bound).
        (
            BackTranslation(name="bt", path=["en", "es", "en"], engine="hf", model="m", device="cuda:1"),
            None,
            GPU_FIXED_SENTENCES,
        ),
        (Identity(name="same"), {"min_cosine": 0.1, "device": "cuda"}, GPU_FIXED_SENTENCES),
        (
            BackTranslation(name="bt", path=["en", "es", "en"], engine="hf", model="m"),
            {"device": "cuda"},
            GPU_FIXED_SENTENCES,
        ),
    ],
    ids=[
        "identity",
        "meaning-filter",
        "synonyms",
        "apertium",
        "neural",
        "neural-filtered",
        "neural-gpu",
        "meaning-gpu",
        "one-on-gpu",
    ],
)
def test_only_views_that_cannot_depend_on_their_batch_commit_by_time(tmp_path, spec, meaning, fixed):
    """A neural engine pads and batches per chunk and the meaning filter embeds per chunk, so
    time-sized chunks could change their views or verdicts from one run to the next."""
    filters = FilterSpec(meaning=meaning)
    with Lake(tmp_path / "lake") as lake:
        assert views_module._commit_sizes(spec, filters, None, lake).fixed == fixed
        assert views_module._commit_sizes(spec, filters, 7, lake).fixed == 7  # a recipe's own size always holds


def test_commits_for_carries_the_size_from_shard_to_shard():
    assert commits_for(10_000, 0.0, 0.0, shards=2) == 4 + 1  # 512, 1024, 2048, 1416; then 5,000 at once
    assert commits_for(10_000, 0.0, 0.0, fixed=512, shards=2) == 2 * 10


def test_a_shards_commits_start_at_the_size_the_last_shard_of_its_augmenter_reached(tmp_path, monkeypatch):
    texts = [f"sentence number {i}." for i in range(2000)]
    rows = [{"corpus": "c", "sentence_id": sentence_id(t), "text": t, "lang": "en"} for t in texts]
    monkeypatch.setattr(
        views_module, "CommitSizes", lambda fixed, start, **_: CommitSizes(fixed, clock=FakeClock(0.0), start=start)
    )
    with Lake(tmp_path / "lake") as lake:
        lake.append("sentences", pa.Table.from_pylist(rows, schema=SENTENCES))
        commits = []
        for index in range(2):
            progress: list[int] = []
            make_shard_views(lake, "c", Identity(name="same"), FilterSpec(), run_id="r", shard=Shard(index, 2),
                             on_progress=lambda n, _t, seen=progress: seen.append(n))  # fmt: skip
            commits.append(len(progress) - 1)
    assert commits == [2, 1]  # ~1,000 sentences: 512 then the rest; the second shard starts at 2,048


def test_a_shards_files_cover_only_its_own_id_range_so_later_commits_skip_them(tmp_path):
    """Shards are ranges of the id space: each views and translations file of a shard lies in
    its range, so a later shard's duplicate check and cache lookup prune it by min/max."""
    import pyarrow.parquet as pq

    texts = [f"sentence number {i} is here." for i in range(600)]
    rows = [{"corpus": "c", "sentence_id": sentence_id(t), "text": t, "lang": "en"} for t in texts]
    with Lake(tmp_path / "lake") as lake:
        lake.append("sentences", pa.Table.from_pylist(rows, schema=SENTENCES))
        for index in range(3):
            make_shard_views(lake, "c", Identity(name="same"), FilterSpec(), run_id="r", shard=Shard(index, 3))
        files = lake.arrow("SELECT data_file FROM ducklake_list_files(?, 'views')", [CATALOG_NAME])
        shards = []
        for path in files["data_file"].to_pylist():
            ids = pq.read_table(path, columns=["sentence_id"])["sentence_id"].to_pylist()
            shards.append({int(i[:8], 16) * 3 // 2**32 for i in ids})
    assert len(shards) >= 3 and all(len(s) == 1 for s in shards), shards
    # A forward translation's cache rows are keyed by the source's text hash: the sentence id.
    assert all(sentence_id(t) == text_hash(t) for t in texts)


@pytest.mark.parametrize("count", [1, 2, 3, 7, 173, 1000])
def test_a_shards_id_range_holds_exactly_the_ids_of_the_numeric_rule_and_every_string_has_one_shard(count):
    """Shard.bounds compares strings (pruned by min/max, nothing computed per row): for lake ids
    it must give the shard floor(first 32 bits * count / 2^32), and any string exactly one shard."""
    import random

    rng = random.Random(count)
    ids = [f"{rng.getrandbits(64):016x}" for _ in range(2000)]
    for index in range(count):  # the ids either side of each edge
        edge = -(-index * 2**32 // count)
        ids += [f"{value:08x}{rng.getrandbits(32):08x}" for value in (edge - 1, edge) if 0 <= value < 2**32]
    ids += ["", "0", "ffffffffffffffff", "g", "FFFF", "zzz"]
    shards = [Shard(index, count).bounds() for index in range(count)]
    for sentence in ids:
        holding = [i for i, (low, high) in enumerate(shards)
                   if (low is None or sentence >= low) and (high is None or sentence < high)]  # fmt: skip
        assert len(holding) == 1, (sentence, holding)
        if len(sentence) == 16 and all(c in "0123456789abcdef" for c in sentence):
            assert holding[0] == int(sentence[:8], 16) * count // 2**32, sentence


def test_a_batch_dependent_engine_commits_larger_fixed_chunks_on_a_gpu():
    assert [batch_variant_chunk(d) for d in ("cpu", "cuda", "cuda:3", "mps")] == [
        BATCH_VARIANT_CHUNK, GPU_BATCH_VARIANT_CHUNK, GPU_BATCH_VARIANT_CHUNK, GPU_BATCH_VARIANT_CHUNK]  # fmt: skip
    assert BATCH_VARIANT_CHUNK < GPU_BATCH_VARIANT_CHUNK <= GPU_FIXED_SENTENCES


BATCH_RECORDER = '''
"""A batch-dependent stand-in engine that records how many texts each call gets."""

from viewmill.augment.engines import Engine

CALLS = []


class Recorder:
    name, model, revision = "batchrec", "batchrec", "1"

    def translate(self, texts, src, tgt, decoding):
        CALLS.append(len(texts))
        return [[text.upper()] for text in texts]

    def close(self):
        pass


ENGINE = Engine(lambda src, tgt, options: Recorder(), needs_model=False, description="records batches")
'''


@pytest.mark.parametrize(("device", "largest"), [("cpu", BATCH_VARIANT_CHUNK), ("cuda", GPU_BATCH_VARIANT_CHUNK)])
def test_a_gpu_engine_is_handed_its_larger_chunks_end_to_end(tmp_path, monkeypatch, device, largest):
    """The augmenter's device reaches both chunkings: the views' fixed commit and the
    translations' commit, so a GPU engine sees 2,048 texts a call, not the CPU's 256."""
    install_plugin(tmp_path / "site", monkeypatch, "viewmill_batchrec", BATCH_RECORDER,
                   "[viewmill.engines]\nbatchrec = viewmill_batchrec:ENGINE\n")  # fmt: skip
    forget_plugin("viewmill_batchrec")
    import viewmill_batchrec

    texts = [f"sentence number {i}." for i in range(5000)]
    rows = [{"corpus": "c", "sentence_id": sentence_id(t), "text": t, "lang": "en"} for t in texts]
    spec = Forward(name="fwd", engine="batchrec", target="de", device=device)
    with Lake(tmp_path / "lake") as lake:
        lake.append("sentences", pa.Table.from_pylist(rows, schema=SENTENCES))
        report = make_shard_views(lake, "c", spec, FilterSpec(), run_id="r")
    assert report.new_views == 5000
    assert max(viewmill_batchrec.CALLS) == largest and sum(viewmill_batchrec.CALLS) == 5000
    forget_plugin("viewmill_batchrec")


def test_a_fixed_chunk_other_than_512_is_part_of_the_configuration_hash():
    """Views batched in a GPU's 4,096-sentence chunks, filtered in the meaning filter's 2,048 on
    a CPU, or made in a recipe's own chunk, are another configuration than the 512-sentence
    chunks they had before; an unfiltered neural engine on the CPU keeps the hash it always had,
    and views that do not depend on their batch ignore the chunk."""

    class Producer:
        identity: ClassVar[list] = [["hf", "m", "1"]]

    def hashed(device: str, meaning: dict | None = None, chunk: int | None = None, spec=None) -> str:
        spec = spec or BackTranslation(name="bt", path=["en", "es", "en"], engine="hf", model="m", device=device)
        judge = None if meaning is None else MeaningJudge("weights", lambda texts: None)
        return views_module.config_hash(spec, FilterSpec(meaning=meaning), Producer(), judge, chunk)

    spec = BackTranslation(name="bt", path=["en", "es", "en"], engine="hf", model="m")
    cpu = fingerprint(spec.model_dump(), FilterSpec().model_dump(), Producer.identity)
    assert hashed("cpu") == cpu == hashed("cpu", chunk=512)
    on_gpu = fingerprint(spec.model_copy(update={"device": "cuda"}).model_dump(), FilterSpec().model_dump(),
                         Producer.identity, ["gpu_chunk", GPU_FIXED_SENTENCES])  # fmt: skip
    assert hashed("cuda") == on_gpu == hashed("cuda", chunk=GPU_FIXED_SENTENCES)  # hashed as before
    judge = MeaningJudge("weights", lambda texts: None)
    filtered = fingerprint(spec.model_dump(), FilterSpec(meaning={}).model_dump(), Producer.identity,
                           judge.identity, ["chunk", MEANING_FIXED_SENTENCES])  # fmt: skip
    assert hashed("cpu", {}) == filtered
    assert hashed("cpu", {"device": "cuda"}) != hashed("cpu", {})  # the meaning filter on a GPU: its chunk too
    assert hashed("cpu", chunk=64) != cpu and hashed("cpu", {}, chunk=512) != filtered  # the recipe's own chunk
    apertium = BackTranslation(name="bt", path=["en", "es", "en"])  # rule-based: the same views however batched
    assert hashed("cpu", spec=apertium, chunk=64) == hashed("cpu", spec=apertium)


@pytest.mark.parametrize(
    ("spec", "meaning", "gpu"),
    [
        (Identity(name="same"), None, False),
        (Identity(name="same"), {"device": "cuda"}, True),  # the meaning filter's encoder on the GPU
        (BackTranslation(name="bt", path=["en", "es", "en"], engine="hf", model="m", device="cuda:1"), None, True),
        (BackTranslation(name="bt", path=["en", "es", "en"], engine="hf", model="m"), {"device": "cpu"}, False),
    ],
)
def test_a_shard_holds_the_gpu_where_its_engine_or_its_meaning_filter_runs_there(spec, meaning, gpu):
    """What takes the flow's `gpu` concurrency slot for a shard, and a GPU's fixed chunk."""
    assert on_gpu(*views_module.model_devices(spec, FilterSpec(meaning=meaning))) is gpu
