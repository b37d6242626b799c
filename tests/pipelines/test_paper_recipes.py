"""The paper recipes, run through the same code on tiny local models in place of hub ids."""

from pathlib import Path

import pytest
from viewmill.pipelines.recipe import load_recipe
from viewmill.pipelines.run import RunContext, run_recipe
from viewmill.pipelines.state import StatePaths
from viewmill.storage.lake import Lake

from tests.conftest import SENTENCES
from tests.tiny_mt import build_tiny_fsmt, build_tiny_m2m100, build_tiny_marian

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


@pytest.fixture(scope="module")
def tiny_hub(tmp_path_factory):
    root = tmp_path_factory.mktemp("hub")
    marian = build_tiny_marian(root / "marian", SENTENCES * 3)
    return {
        "facebook/wmt19-en-de": build_tiny_fsmt(root / "wmt19-en-de", ("en", "de")),
        "facebook/wmt19-de-en": build_tiny_fsmt(root / "wmt19-de-en", ("de", "en"), seed=1),
        "Helsinki-NLP/opus-mt-en-fr": marian,
        "Helsinki-NLP/opus-mt-fr-en": marian,
        "facebook/m2m100_418M": build_tiny_m2m100(root / "m2m100", SENTENCES * 3),
    }


def _localised(name: str, tiny_hub: dict, corpus: Path):
    recipe = load_recipe(RECIPES / name)
    recipe.corpus.format, recipe.corpus.files, recipe.corpus.detokenize = "text", [corpus], False
    for spec in recipe.augmenters:
        if getattr(spec, "engine", "apertium") != "apertium":
            spec.compute_type = "float32"
            spec.model = str(tiny_hub[spec.model]) if spec.model else None
            spec.models = [str(tiny_hub[m]) for m in spec.models] if spec.models else None
        if hasattr(spec, "decoding"):
            spec.decoding = spec.decoding.model_copy(update={"beam_size": 2, "max_length_ratio": 1.0})
    recipe.filters.min_chrf = 0.0  # random weights make random text
    recipe.filters.max_length_ratio = 100.0
    recipe.filters.min_length_ratio = 0.0
    recipe.train = recipe.evaluate = None
    return recipe


@pytest.mark.parametrize("name", ["bsl-wmt19.yaml", "multilingual-m2m100.yaml"])
def test_paper_recipe_runs_on_tiny_models(tmp_path, tiny_hub, name, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES[:8]) + "\n", encoding="utf-8")
    recipe = _localised(name, tiny_hub, corpus)
    state = StatePaths(tmp_path / "state")
    summary = run_recipe(RunContext(recipe, state))
    pairings = recipe.pair.pairs
    assert all(report["new_views"] == 8 for report in summary["augment"].values())
    with Lake(state.lake, read_only=True) as lake:
        langs = {
            r["augmenter"]: r["lang"] for r in lake.arrow("SELECT DISTINCT augmenter, lang FROM views").to_pylist()
        }
        pairs = lake.scalar("SELECT count(*) FROM pairs")
        engines = lake.scalar("SELECT count(DISTINCT engine) FROM translations")
    assert pairs == summary["snapshot"]["n_pairs"] > 0
    assert pairs <= 8 * len(pairings)
    assert engines == 1  # ctranslate2, as the recipe says
    if name.startswith("multilingual"):
        assert langs == {"en": "en", "fwd_ar": "ar", "fwd_es": "es", "fwd_tr": "tr", "fwd_de": "de", "fwd_fr": "fr"}
    else:
        assert set(langs.values()) == {"en"}
