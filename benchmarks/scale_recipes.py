"""The two recipe profiles `pipeline_scale.py` runs, and the plugin engine its cheap one uses.

`full`: real engines. Apertium en>es (`fwd_es`) and the round trip en>es>en (`bt_es`, whose
en>es hop comes from the translation cache), the identity view, the meaning filter with the
embedded MiniLM, `pair.pairings` of English with each, mined hard negatives, a few InfoNCE
training steps and STS-B dev evaluation.

`cheap`: the pipeline's own machinery at a million sentences, where translating and embedding
would take hours on 2 cores: the identity view and a forward "translation" by `benchswap`, a
plugin engine (entry point `viewmill.engines`, installed as a dist-info folder on PYTHONPATH)
that swaps each pair of neighbouring words: deterministic, about as fast as a copy, and it
goes through the translation cache and the filters as a real engine's output does. WordNet's
`synonym` augmenter was the built-in candidate, but it replaces about 900 sentences/s (20 min
for 1M on its own), so it would measure nltk, not the pipeline.

`cheap-neural`: `cheap` with the swap declared batch-dependent (`benchswap-batched`), as a
neural engine is, so its views commit in fixed chunks and its translations every 256: the
pipeline's own cost as a neural engine's run pays it, without the engine's.

`gpu`: the `full` profile's stages on a GPU box with a neural engine (issue 32.4): the identity
view, a forward translation and a round trip through one `hf` model (MarianMT) on the GPU, the
meaning filter and training on the GPU (no mined negatives: see the recipe), STS-B dev
evaluation (on the CPU, where evaluation runs). The models are folders
given on the command line: on the lent box, random weights at a real model's size (no weights
travel there), whose outputs run to the length cap (1.2x the longest source of a batch); so the
length and meaning filters keep every view (their work is still done) and the timings are a
neural engine's worst case at that cap.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
STS_DEV = ROOT / "recipes" / "data" / "stsbenchmark" / "sts-dev.csv"
PLUGIN_NAME = "viewmill_bench_plugin"
PLUGIN_ENGINE = "benchswap"
PROFILES = ("full", "cheap", "cheap-neural", "gpu")

PLUGIN_SOURCE = '''
"""A deterministic stand-in translation engine: neighbouring words swapped."""

from viewmill.augment.engines import Engine


class Swap:
    name, model, revision = "benchswap", "benchswap", "1"

    def translate(self, texts, src, tgt, decoding):
        out = []
        for text in texts:
            words = text.split(" ")
            for i in range(0, len(words) - 1, 2):
                words[i], words[i + 1] = words[i + 1], words[i]
            out.append([" ".join(words)])
        return out

    def close(self):
        pass


ENGINE = Engine(
    lambda src, tgt, options: Swap(), needs_model=False, description="swaps neighbouring words", batch_invariant=True
)
# The same swap declared batch-dependent, as a neural engine is: fixed chunks and commits.
ENGINE_BATCHED = Engine(
    lambda src, tgt, options: Swap(), needs_model=False, description="swaps neighbouring words, in fixed chunks"
)
'''


def install_plugin(site: Path) -> Path:
    """The plugin's module and dist-info in `site` (put it on PYTHONPATH): what pip leaves."""
    info = site / f"{PLUGIN_NAME}-0.1.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (site / f"{PLUGIN_NAME}.py").write_text(PLUGIN_SOURCE, encoding="utf-8")
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {PLUGIN_NAME}\nVersion: 0.1\n", encoding="utf-8")
    entry = (f"[viewmill.engines]\n{PLUGIN_ENGINE} = {PLUGIN_NAME}:ENGINE\n"
             f"{PLUGIN_ENGINE}-batched = {PLUGIN_NAME}:ENGINE_BATCHED\n")  # fmt: skip
    (info / "entry_points.txt").write_text(textwrap.dedent(entry), encoding="utf-8")
    return site


def recipe(profile: str, corpus: Path, fmt: str, steps: int, batch_size: int = 32,
           models: dict[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    """The profile's recipe for `corpus` (min and max words as benchmarks/ingest.py's); `gpu`
    takes `models`: mt (a MarianMT folder), encoder (a sentence-transformers folder), device."""
    corpus_spec = {"files": [str(corpus)], "format": fmt, "min_words": 3, "max_words": 64}
    train = {"objective": "infonce", "encoder": "embedded:all-MiniLM-L6-v2", "steps": steps,
             "batch_size": batch_size, "max_length": 64, "seed": 13, "checkpoint_every": 0}  # fmt: skip
    if profile == "gpu":
        return gpu_recipe(corpus_spec, train, **(models or {}))
    if profile in ("cheap", "cheap-neural"):
        engine = PLUGIN_ENGINE if profile == "cheap" else f"{PLUGIN_ENGINE}-batched"
        return {
            "name": f"scale-{profile}",
            "corpus": corpus_spec,
            "augmenters": [
                {"name": "en", "method": "identity"},
                {"name": "swap", "method": "forward", "engine": engine, "target": "xx"},
            ],
            "filters": {"min_length_ratio": 0.5, "max_length_ratio": 2.0},
            "pair": {"view_a": "en", "view_b": "swap"},
            "train": train,
        }
    sts_dev = {"name": "stsb-dev", "format": "stsb", "path": str(STS_DEV)}
    return {
        "name": "scale-full",
        "corpus": corpus_spec,
        "augmenters": [
            {"name": "en", "method": "identity"},
            {"name": "fwd_es", "method": "forward", "engine": "apertium", "target": "es"},
            {"name": "bt_es", "method": "backtranslation", "engine": "apertium", "path": ["en", "es", "en"]},
        ],
        # A translation shares few character n-grams with its source (no chrF floor), and an
        # English encoder scores Spanish low: a floor that keeps most views, so that pairing and
        # mining see the corpus's size; every view is still embedded and judged.
        "filters": {"min_length_ratio": 0.5, "max_length_ratio": 2.0,
                    "meaning": {"encoder": "embedded:all-MiniLM-L6-v2", "min_cosine": 0.1, "max_cosine": 0.999}},
        "pair": {"pairings": [["en", "fwd_es"], ["en", "bt_es"]],
                 "negatives": {"source": "mined", "per_anchor": 1}},
        "train": train,
        "evaluate": {"baseline": False, "tasks": [sts_dev]},
    }  # fmt: skip


def gpu_recipe(corpus_spec: dict, train: dict, mt: str, encoder: str, device: str = "cuda") -> dict[str, Any]:
    """The `gpu` profile: every model on `device`, one MarianMT folder for every hop."""
    sts_dev = {"name": "stsb-dev", "format": "stsb", "path": str(STS_DEV)}
    # Random weights never stop: outputs are cut at 1.2x a batch's longest source, about a real
    # translation's length (the default 3x would time a model that rambles, three hops deep).
    on = {"engine": "hf", "device": device, "decoding": {"max_length_ratio": 1.2}}
    return {
        "name": "scale-gpu",
        "corpus": corpus_spec,
        "augmenters": [
            {"name": "en", "method": "identity"},
            {"name": "fwd_de", "method": "forward", "model": mt, "target": "de", **on},
            {"name": "bt_de", "method": "backtranslation", "models": [mt, mt], "path": ["en", "de", "en"], **on},
        ],
        "filters": {"min_length_ratio": 0, "max_length_ratio": 1000, "max_repeated_ngram": 1000,
                    "meaning": {"encoder": encoder, "min_cosine": -1, "max_cosine": 1, "device": device}},
        # No mined negatives: a random encoder's cosines are all alike, so the miner's margins drop
        # nearly every candidate and the plan's sample is left with too few pairs to train on.
        "pair": {"pairings": [["en", "fwd_de"], ["en", "bt_de"]]},
        "train": train | {"encoder": encoder, "device": device},
        "evaluate": {"baseline": False, "tasks": [sts_dev]},
    }  # fmt: skip
