"""Chained engines (issue 31, item 3): forward translation through pivots and round trips of
several hops, one engine call per hop, each hop cached on its own and recorded in the view's
provenance; Debian's Apertium pairs found under their mode names."""

from __future__ import annotations

import zlib
from typing import ClassVar

import numpy as np
import pyarrow as pa
import pytest
import viewmill.augment.translation_augmenters as translation_module
from pydantic import TypeAdapter, ValidationError
from viewmill.augment.apertium import ApertiumEngine, apertium_modes, apertium_modes_dir
from viewmill.augment.augmenters import AugmenterSpec, BackTranslation, Forward, Provenance
from viewmill.augment.chain_report import hop_rows
from viewmill.augment.chain_report import markdown_lines as chain_markdown
from viewmill.augment.engines import EngineError
from viewmill.augment.quality import FilterSpec
from viewmill.augment.translation_augmenters import chain_hops
from viewmill.augment.views_report import build_report, to_markdown
from viewmill.storage.ids import sentence_id
from viewmill.storage.lake import Lake
from viewmill.storage.schema import SENTENCES

from tests.conftest import SENTENCES as TEXTS
from tests.conftest import needs_apertium
from tests.views import make_views

CHAIN_PAIRS = {"es-fr", "fr-es", "spa-ita", "ita-spa", "es-pt", "cat-ita"}
needs_chain_pairs = pytest.mark.skipif(
    needs_apertium.args[0] or not apertium_modes(apertium_modes_dir()) >= CHAIN_PAIRS,
    reason="Debian's Apertium chain pairs are not installed (./quickstart.sh test installs them)",
)
TWO = TEXTS[:2]
FILTERS = FilterSpec(min_chrf=0, max_length_ratio=3.0)
spec = TypeAdapter(AugmenterSpec).validate_python


def _lake(tmp_path, texts=TWO) -> Lake:
    lake = Lake(tmp_path / "lake")
    rows = [{"corpus": "c", "sentence_id": sentence_id(t), "text": t, "lang": "en"} for t in texts]
    lake.append("sentences", pa.Table.from_pylist(rows, schema=SENTENCES))
    return lake


class CountingEngine:
    """The real Apertium engine, recording every call's direction and batch size."""

    calls: ClassVar[list[tuple[str, str, int]]] = []

    def __init__(self, src, tgt):
        self.inner = ApertiumEngine(src, tgt)
        self.name, self.model, self.revision = self.inner.name, self.inner.model, self.inner.revision

    def translate(self, texts, src, tgt, decoding):
        CountingEngine.calls.append((src, tgt, len(texts)))
        return self.inner.translate(texts, src, tgt, decoding)

    def close(self):
        self.inner.close()


@pytest.fixture
def counting(monkeypatch):
    CountingEngine.calls = []
    monkeypatch.setattr(translation_module, "make_engine", lambda engine, src, tgt, *rest: CountingEngine(src, tgt))
    return CountingEngine


def test_pivots_read_as_one_chain_whichever_way_they_are_written():
    short, long = (
        spec({"name": "f", "method": "forward", "pivots": ["es", "fr"]}),
        spec({"name": "f", "method": "forward", "target": "fr", "pivots": ["es"]}),
    )
    assert isinstance(short, Forward) and short.model_dump() == long.model_dump()
    assert (short.target, short.pivots, short.legs, short.path_label) == (
        "fr", ["es"], [("en", "es"), ("es", "fr")], "en>es>fr"
    )  # fmt: skip
    # A straight forward augmenter dumps (and so hashes) as it did before pivots: no key added.
    assert "pivots" not in spec({"name": "f", "method": "forward", "target": "es"}).model_dump()
    with pytest.raises(ValidationError, match="a forward chain passes each language once: en>es>en>fr"):
        spec({"name": "f", "method": "forward", "target": "fr", "pivots": ["es", "en"]})


def test_chain_hops_pair_each_hop_with_its_languages():
    provenance = Provenance(engines=["apertium", "apertium"], models=["a@1", "b@2"], cache_keys=["k1", "k2"])
    assert chain_hops("en>es>fr", provenance) == [
        {"engine": "apertium", "model": "a@1", "src": "en", "tgt": "es", "cache_key": "k1"},
        {"engine": "apertium", "model": "b@2", "src": "es", "tgt": "fr", "cache_key": "k2"},
    ]
    with pytest.raises(ValueError, match="path en>fr has 1 hops, its provenance 2 engines"):
        chain_hops("en>fr", provenance)


@needs_apertium
def test_a_direction_debian_does_not_ship_names_the_chain_that_reaches_it():
    with pytest.raises(EngineError) as raised:
        ApertiumEngine("en", "fr")
    assert str(raised.value).startswith(
        "Debian ships no Apertium package for en>fr: chain through a language both reach, e.g. pivots: [es] on a "
        "forward augmenter or path: [en, es, fr, ...] (Debian's pairs: ca-en, ca-es, ca-fr, ca-it, ca-pt, en-es, "
    )


@needs_chain_pairs
@pytest.mark.parametrize(
    ("src", "tgt", "mode", "package"),
    [
        ("es", "fr", "es-fr", "apertium-fr-es"),
        ("fr", "es", "fr-es", "apertium-fr-es"),
        ("es", "it", "spa-ita", "apertium-spa-ita"),
        ("it", "ca", "ita-cat", "apertium-cat-ita"),
        ("es", "pt", "es-pt", "apertium-es-pt"),
        ("en", "gl", "en-gl", "apertium-en-gl"),
    ],
)
def test_debian_pairs_are_found_under_either_mode_naming(src, tgt, mode, package):
    engine = ApertiumEngine(src, tgt)
    assert (engine.mode, engine.model) == (mode, package)
    assert engine.revision != "unknown", "the package's Debian version keys the cache"


@needs_chain_pairs
def test_a_real_forward_chain_gives_french_and_records_every_hop(tmp_path):
    with _lake(tmp_path) as lake:
        report = make_views(lake, "c", spec({"name": "fwd_fr", "method": "forward", "pivots": ["es", "fr"]}),
                            FILTERS, run_id="r1")  # fmt: skip
        assert (report.new_views, report.kept) == (2, 2)
        views = lake.arrow("SELECT sentence_id, text, path, lang, provenance FROM views ORDER BY text").to_pylist()
        assert [v["text"] for v in views] == [
            "Deux chiens sont en train de courir à travers un champ.",
            "Un homme est en train de toucher une guitare dans la rue.",
        ]
        assert {(v["path"], v["lang"]) for v in views} == {("en>es>fr", "fr")}
        hops = chain_hops(views[0]["path"], Provenance(**views[0]["provenance"]))
        assert [(h["engine"], h["model"].split("@")[0], h["src"], h["tgt"]) for h in hops] == [
            ("apertium", "apertium-eng-spa", "en", "es"),
            ("apertium", "apertium-fr-es", "es", "fr"),
        ]
        # Each hop's cache key is a translations row of that hop's languages and engine model.
        for hop in hops:
            row = lake.con.execute(
                "SELECT src_lang, tgt_lang, model || '@' || revision FROM translations WHERE cache_key = ?",
                [hop["cache_key"]],
            ).fetchall()
            assert row == [(hop["src"], hop["tgt"], hop["model"])]


@needs_chain_pairs
def test_a_shared_first_hop_is_translated_once_and_reused_from_the_cache(tmp_path, counting):
    augmenters = [
        spec({"name": "fwd_es", "method": "forward", "target": "es"}),
        spec({"name": "fwd_fr", "method": "forward", "pivots": ["es", "fr"]}),
        spec({"name": "fwd_it", "method": "forward", "pivots": ["es", "it"]}),
    ]
    with _lake(tmp_path) as lake:
        reports = [make_views(lake, "c", a, FILTERS, run_id="r1") for a in augmenters]
        assert counting.calls == [("en", "es", 2), ("es", "fr", 2), ("es", "it", 2)], "en>es asked once"
        assert [(r.cache.hits, r.cache.misses) for r in reports] == [(0, 2), (2, 2), (2, 2)]
        by_hop = lake.con.execute(
            "SELECT src_lang || '>' || tgt_lang, count(*) FROM translations GROUP BY ALL ORDER BY 1"
        ).fetchall()
        assert by_hop == [("en>es", 2), ("es>fr", 2), ("es>it", 2)]
        first_hops = lake.con.execute(
            "SELECT augmenter, list_sort(list(provenance.cache_keys[1])) FROM views GROUP BY ALL ORDER BY 1"
        ).fetchall()
        assert len({tuple(keys) for _, keys in first_hops}) == 1, "every view's first hop is the same cache row"
        assert lake.scalar("SELECT count(*) FROM views") == 6


@needs_chain_pairs
def test_a_round_trip_of_four_hops_returns_to_english(tmp_path, counting):
    trip = BackTranslation(name="bt_pt", path=["en", "es", "pt", "es", "en"])
    with _lake(tmp_path) as lake:
        report = make_views(lake, "c", trip, FILTERS, run_id="r1")
        assert report.new_views == 2
        assert [c[:2] for c in counting.calls] == [("en", "es"), ("es", "pt"), ("pt", "es"), ("es", "en")]
        view = lake.arrow("SELECT text, path, provenance FROM views ORDER BY text").to_pylist()[0]
        assert view["path"] == "en>es>pt>es>en" and view["text"].startswith("A man")
        assert [h["model"].split("@")[0] for h in chain_hops(view["path"], Provenance(**view["provenance"]))] == [
            "apertium-eng-spa", "apertium-es-pt", "apertium-es-pt", "apertium-eng-spa",
        ]  # fmt: skip


@needs_chain_pairs
def test_the_views_report_shows_what_each_hop_of_a_chain_costs(tmp_path):
    def bag_of_words(texts):  # a real, deterministic encoder: hashed word counts
        out = np.zeros((len(texts), 64))
        for i, text in enumerate(texts):
            for word in text.lower().split():
                out[i, zlib.crc32(word.encode()) % 64] += 1
        return out

    with _lake(tmp_path) as lake:
        for augmenter in ({"name": "fwd_es", "method": "forward", "target": "es"},
                          {"name": "fwd_fr", "method": "forward", "pivots": ["es", "fr"]}):  # fmt: skip
            make_views(lake, "c", spec(augmenter), FILTERS, run_id="r1")
        report = build_report(lake, None, encode=bag_of_words, encoder_name="bag-of-words")
    by_name = {r.augmenter: r for r in report.augmenters}
    rows = [(row.chain, row.hop, row.reached, row.by and row.by.augmenter) for row in hop_rows(report.augmenters)]
    assert rows == [("en>es>fr", "en>es", "en>es", "fwd_es"), ("en>es>fr", "es>fr", "en>es>fr", "fwd_fr")]
    es, fr = by_name["fwd_es"], by_name["fwd_fr"]
    assert (es.kept, es.views, fr.kept, fr.views, fr.cosine_n) == (2, 2, 2, 2, 2)
    text = to_markdown(report)
    assert "## Chains: what each hop costs" in text
    assert (
        f"| en>es>fr | en>es | en>es | fwd_es | 2 / 2 | {es.chrf_mean:.2f} | {es.cosine_mean:.3f} (2) |\n"
        f"| en>es>fr | es>fr | en>es>fr | fwd_fr | 2 / 2 | {fr.chrf_mean:.2f} | {fr.cosine_mean:.3f} (2) |\n"
    ) in text
    # Without the first hop's own augmenter, the row says so.
    alone = [r for r in report.augmenters if r.augmenter == "fwd_fr"]
    assert chain_markdown(alone)[7] == "| en>es>fr | en>es | en>es | (no augmenter stops here) | – | – | – |"
