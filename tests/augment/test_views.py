from typing import ClassVar

import pyarrow as pa
import pytest
import viewmill.augment.translation_augmenters as translation_module
from viewmill.augment.apertium import ApertiumEngine
from viewmill.augment.augmenters import BackTranslation
from viewmill.augment.engines import EngineError
from viewmill.augment.quality import FilterSpec
from viewmill.storage.ids import sentence_id
from viewmill.storage.lake import Lake
from viewmill.storage.schema import SENTENCES

from tests.conftest import SENTENCES as TEXTS
from tests.conftest import needs_apertium
from tests.views import make_views

pytestmark = needs_apertium
SPEC = BackTranslation(name="bt_es", path=["en", "es", "en"])


def _lake_with_corpus(tmp_path, texts=TEXTS) -> Lake:
    lake = Lake(tmp_path / "lake")
    rows = [{"corpus": "c", "sentence_id": sentence_id(t), "text": t, "lang": "en"} for t in texts]
    lake.append("sentences", pa.Table.from_pylist(rows, schema=SENTENCES))
    return lake


class CountingEngine:
    """The real Apertium engine, counting what it is asked, optionally failing on call N."""

    calls: ClassVar[list[int]] = []
    fail_on_call: ClassVar[int | None] = None

    def __init__(self, src, tgt):
        self.inner = ApertiumEngine(src, tgt)
        self.name, self.model, self.revision = self.inner.name, self.inner.model, self.inner.revision

    def translate(self, texts, src, tgt, decoding):
        CountingEngine.calls.append(len(texts))
        if CountingEngine.fail_on_call == len(CountingEngine.calls):
            raise EngineError("simulated crash mid-run")
        return self.inner.translate(texts, src, tgt, decoding)

    def close(self):
        self.inner.close()


@pytest.fixture
def counting(monkeypatch):
    CountingEngine.calls, CountingEngine.fail_on_call = [], None
    monkeypatch.setattr(translation_module, "make_engine", lambda engine, src, tgt, *rest: CountingEngine(src, tgt))
    return CountingEngine


def test_every_sentence_gets_one_view_with_provenance_and_quality(tmp_path):
    with _lake_with_corpus(tmp_path) as lake:
        report = make_views(lake, "c", SPEC, FilterSpec(), run_id="r1")
        assert (report.sentences, report.new_views, report.kept + report.rejected) == (20, 20, 20)
        assert report.cache.misses == 2 * 20 - report.cache.hits  # two legs
        views = lake.arrow("SELECT * FROM views").to_pylist()
        assert len({v["sentence_id"] for v in views}) == 20
        first = views[0]
        assert first["path"] == "en>es>en" and first["method"] == "backtranslation"
        assert first["provenance"]["engines"] == ["apertium", "apertium"]
        assert len(first["provenance"]["cache_keys"]) == 2
        assert 0 <= first["quality"]["chrf_to_source"] <= 100
        keys = lake.scalar("SELECT count(DISTINCT cache_key) FROM translations")
        assert keys == lake.scalar("SELECT count(*) FROM translations")


def test_rerun_translates_nothing_and_new_filters_reuse_the_translation_cache(tmp_path, counting):
    with _lake_with_corpus(tmp_path) as lake:
        make_views(lake, "c", SPEC, FilterSpec(), run_id="r1")
        translated = sum(counting.calls)
        again = make_views(lake, "c", SPEC, FilterSpec(), run_id="r2")
        assert (again.new_views, again.reused_views, sum(counting.calls)) == (0, 20, translated)
        strict = make_views(lake, "c", SPEC, FilterSpec(min_chrf=99), run_id="r3")
        assert strict.new_views == 20 and strict.cache.misses == 0 and sum(counting.calls) == translated
        assert strict.rejected >= 15  # almost no round trip is a near copy


def test_a_run_killed_mid_way_resumes_without_losing_or_repeating_work(tmp_path, counting):
    with _lake_with_corpus(tmp_path) as lake:
        counting.fail_on_call = 3  # chunk 1 fully done (2 legs), chunk 2 dies on its first leg
        with pytest.raises(EngineError, match="simulated"):
            make_views(lake, "c", SPEC, FilterSpec(), run_id="r1", chunk_size=8)
        assert lake.scalar("SELECT count(*) FROM views") == 8
        before = lake.arrow("SELECT view_id, text FROM views ORDER BY view_id").to_pylist()
        counting.fail_on_call, counting.calls = None, []
        report = make_views(lake, "c", SPEC, FilterSpec(), run_id="r2", chunk_size=8)
        assert report.reused_views == 8 and report.new_views == 12
        assert sum(counting.calls) <= 2 * 12  # only the 12 unfinished sentences are translated
        assert lake.scalar("SELECT count(*) FROM views") == 20
        assert lake.scalar("SELECT count(DISTINCT sentence_id) FROM views") == 20
        kept = lake.arrow("SELECT view_id, text FROM views WHERE run_id = 'r1' ORDER BY view_id").to_pylist()
        assert kept == before


def test_round_trip_must_return_to_its_source_language():
    with pytest.raises(ValueError, match="must end in its source language"):
        BackTranslation(name="x", path=["en", "es", "ca"])


def test_identity_and_synonym_augmenters_make_views_with_their_provenance(tmp_path):
    from viewmill.augment.augmenters import Identity, Synonym

    with _lake_with_corpus(tmp_path) as lake:
        identity = make_views(lake, "c", Identity(name="self"), FilterSpec(reject_identical=True), run_id="r")
        assert identity.kept == 20 and identity.rejected == 0  # the identity view is the source by definition
        synonym = make_views(lake, "c", Synonym(name="syn", ratio=0.3, seed=1), FilterSpec(), run_id="r")
        assert synonym.new_views == 20
        rows = lake.arrow(
            "SELECT s.text AS source, v.text, v.provenance FROM views v JOIN sentences s USING (sentence_id) "
            "WHERE v.augmenter = 'syn'"
        ).to_pylist()
        changed = [r for r in rows if r["text"] != r["source"]]
        assert len(changed) >= 12, "most sentences have a replaceable content word"
        assert all(r["provenance"]["engines"] == ["wordnet"] for r in rows)
        assert all(r["provenance"]["models"][0].startswith("wordnet-3.0@") for r in rows)
        # Per-sentence seeds: the same spec gives the same views however the corpus is chunked.
        again = _lake_with_corpus(tmp_path / "again")
        make_views(again, "c", Synonym(name="syn", ratio=0.3, seed=1), FilterSpec(), run_id="r", chunk_size=3)
        query = "SELECT sentence_id, text FROM views WHERE augmenter = 'syn' ORDER BY ALL"
        assert again.arrow(query).to_pylist() == lake.arrow(query).to_pylist()
        again.close()


def test_mlm_views_change_about_a_fifth_of_the_tokens(tmp_path):
    import torch
    from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast
    from viewmill.augment.augmenters import MaskedLM
    from viewmill.augment.engines import EngineError

    torch.manual_seed(0)
    words = sorted({w.strip(".,").lower() for t in TEXTS for w in t.split()} | {".", ","})
    model_dir = tmp_path / "tiny-mlm"
    model_dir.mkdir()
    (model_dir / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    tokenizer = BertTokenizerFast(vocab=str(model_dir / "vocab.txt"))
    config = BertConfig(vocab_size=len(words) + 5, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64)  # fmt: skip
    BertForMaskedLM(config).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)

    with _lake_with_corpus(tmp_path) as lake:
        spec = MaskedLM(name="mlm", model=str(model_dir), ratio=0.2, seed=3)
        report = make_views(lake, "c", spec, FilterSpec(min_length_ratio=0.0, max_length_ratio=5.0), run_id="r")
        assert report.new_views == 20
        rows = lake.arrow(
            "SELECT s.text AS source, v.text, v.provenance.decoding AS decoding FROM views v "
            "JOIN sentences s USING (sentence_id)"
        ).to_pylist()
    for row in rows:
        source = tokenizer.tokenize(row["source"])
        view = tokenizer.tokenize(row["text"])
        assert row["text"] != row["source"]
        changed = sum(a != b for a, b in zip(source, view, strict=False)) + abs(len(source) - len(view))
        assert 1 <= changed <= max(1, round(0.2 * len(source))) + 1
        assert '"ratio":0.2' in row["decoding"]
    with pytest.raises(EngineError, match="not a masked language model"):
        from tests.tiny_mt import build_tiny_fsmt

        make_views(Lake(tmp_path / "other"), "c", MaskedLM(name="x", model=str(build_tiny_fsmt(tmp_path / "f"))),
                   FilterSpec(), run_id="r")  # fmt: skip
