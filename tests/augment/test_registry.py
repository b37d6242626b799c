"""Registries and entry-point plugins: a third-party distribution (a real dist-info folder on
sys.path) adds augmenters, an engine, corpus formats and an objective; the recipe schema
accepts them, a run uses them, and clashes or unknown names are refused with the fix. A
plugin has the powers viewmill's own entries have: an augmenter opts out of the quality
filters and asks for NLI pairs, a corpus format says it yields them."""

import numpy as np
import pytest
from viewmill.augment.augmenters import AUGMENTERS, augmenter_class
from viewmill.augment.engines import ENGINES, EngineError, make_engine
from viewmill.augment.ingest.readers import READERS, nli_formats
from viewmill.augment.meaning import Candidate, MeaningSpec, judge
from viewmill.augment.meaning_report import CosineFilter, markdown_lines
from viewmill.augment.quality import FilterSpec, quality_signals, reject_reason
from viewmill.pipelines.recipe import RecipeError, load_recipe
from viewmill.pipelines.run import RunContext, run_recipe
from viewmill.pipelines.state import StatePaths
from viewmill.storage.lake import Lake
from viewmill.train.config import TrainConfig
from viewmill.train.objectives import OBJECTIVES

from tests.conftest import SENTENCES
from tests.plugins import forget_plugin, install_plugin
from viewmill.registry import RegistryError

PLUGIN = '''
from typing import ClassVar, Literal

import torch
from viewmill.augment.augmenters import AugmenterConfig, ProducedView, Provenance
from viewmill.augment.engines import Engine
from viewmill.augment.ingest.readers import RawLine, Reader
from viewmill.train.objectives import Objective


class ShoutProducer:
    lang = None
    identity = ["shout-1"]

    def __init__(self, spec):
        self.spec = spec

    def produce(self, chunk, ctx):
        return [ProducedView(text.upper() + self.spec.suffix, Provenance(engines=["shout"])) for _, text in chunk]

    def close(self):
        pass


class Shout(AugmenterConfig):
    method: Literal["shout"] = "shout"
    suffix: str = "!"

    def producer(self, lake):
        return ShoutProducer(self)


class GlossProducer:
    """A premise glossed with the hypotheses NLI data pairs it with: three times as long as
    the sentence, which the length filter would reject."""

    lang = None
    identity = ["gloss-1"]

    def produce(self, chunk, ctx):
        rows = ctx.lake.arrow(
            "SELECT premise_id, hypothesis_text FROM nli_pairs WHERE list_contains(?, premise_id) "
            "ORDER BY hypothesis_text",
            [[sid for sid, _ in chunk]],
        ).to_pylist()
        glosses = {}
        for row in rows:
            glosses.setdefault(row["premise_id"], []).append(row["hypothesis_text"])
        return [
            ProducedView(" / ".join([text, *glosses[sid], *glosses[sid]]), Provenance(engines=["gloss"]))
            if sid in glosses else ProducedView("", reason="no_nli_pair")
            for sid, text in chunk
        ]

    def close(self):
        pass


class Gloss(AugmenterConfig):
    exempt_from_filters: ClassVar[bool] = True
    needs_nli_links: ClassVar[bool] = True
    method: Literal["gloss"] = "gloss"

    def producer(self, lake):
        return GlossProducer()


class Mirror:
    name, model, revision = "mirror", "mirror", "1"

    def translate(self, texts, src, tgt, decoding):
        return [[" ".join(reversed(text.split()))] for text in texts]

    def close(self):
        pass


MIRROR = Engine(lambda src, tgt, options: Mirror(), needs_model=False, description="reverses word order")


def read_pipes(path, options):
    for row, line in enumerate(path.read_text(encoding="utf-8").split("|"), start=1):
        if line.strip():
            yield RawLine(line.strip(), path.name, row)


def read_pipe_pairs(path, options):
    """premise|hypothesis|label, one NLI pair a line."""
    for row, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        premise, hypothesis, label = line.split("|")
        for role, text in (("premise", premise), ("hypothesis", hypothesis)):
            yield RawLine(text, path.name, row, pair_id=str(row), nli_label=label, role=role)


PIPE_PAIRS = Reader(read_pipe_pairs, yields_nli_pairs=True)


class Echo(torch.nn.Module):
    def forward(self, batch, n, *, train_encoder=True):
        return torch.zeros(())

    def head_parameters(self):
        return []


ECHO = Objective(build=lambda config, model: (Echo(), [config.objective]), head=False, temperature=0.2)
'''

ENTRY_POINTS = """
[viewmill.augmenters]
shout = viewmill_test_plugin:Shout
gloss = viewmill_test_plugin:Gloss

[viewmill.engines]
mirror = viewmill_test_plugin:MIRROR

[viewmill.readers]
pipes = viewmill_test_plugin:read_pipes
pipe-pairs = viewmill_test_plugin:PIPE_PAIRS

[viewmill.objectives]
echo = viewmill_test_plugin:ECHO
"""


def install_test_plugin(site, monkeypatch, entry_points: str = ENTRY_POINTS):
    install_plugin(site, monkeypatch, "viewmill_test_plugin", PLUGIN, entry_points)


@pytest.fixture(autouse=True)
def _forget_plugin_module():
    yield
    forget_plugin("viewmill_test_plugin")


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    install_test_plugin(tmp_path / "site", monkeypatch)
    return tmp_path


def test_builtin_names_come_first_and_plugins_only_while_installed(tmp_path, monkeypatch):
    assert ENGINES.names()[:3] == ["apertium", "hf", "ctranslate2"]
    assert AUGMENTERS.names() == ["backtranslation", "forward", "identity", "synonym", "mlm", "entailment"]
    assert OBJECTIVES.names() == ["bsl", "ntxent", "infonce", "sgopt", "isbert", "distill", "infonce-distill"]
    assert READERS.names() == ["text", "book", "senteval", "nli-jsonl", "csv", "parquet", "hf"]
    with monkeypatch.context() as patch:
        install_test_plugin(tmp_path / "site", patch)
        assert ENGINES.names()[-1] == "mirror" and AUGMENTERS.names()[-1] == "shout"
        assert OBJECTIVES.names()[-1] == "echo" and READERS.names()[-1] == "pipes"
    assert "shout" not in AUGMENTERS.names(), "gone with the distribution"


def test_a_plugin_runs_through_recipe_validation_and_a_run(plugin):
    corpus = plugin / "corpus.txt"
    corpus.write_text("|".join(SENTENCES[:6]), encoding="utf-8")
    recipe = plugin / "r.yaml"
    recipe.write_text(
        """
name: plug
corpus: {format: pipes, files: [corpus.txt]}
augmenters:
  - {name: loud, method: shout, suffix: "!!"}
  - {name: back, method: backtranslation, engine: mirror, path: [en, xx, en]}
filters: {min_chrf: 0}
pair: {view_a: loud, view_b: back}
train: {objective: echo, steps: 2, head_warmup_steps: 0}
""",
        encoding="utf-8",
    )
    parsed = load_recipe(recipe)
    assert type(parsed.augmenters[0]).__name__ == "Shout" and parsed.augmenters[0].suffix == "!!"
    assert parsed.train.objective == "echo" and parsed.train.temperature == 0.2
    assert '"method":"shout"' in parsed.as_json(), "the plugin's spec is kept whole in the run record"

    state = StatePaths(plugin / "state")
    summary = run_recipe(RunContext(parsed, state), train=False)
    assert summary["ingest"]["sentences"] == 6
    assert {name: r["new_views"] for name, r in summary["augment"].items()} == {"loud": 6, "back": 6}
    with Lake(state.lake, read_only=True) as lake:
        loud = lake.arrow("SELECT v.text, s.text AS source FROM views v JOIN sentences s USING (sentence_id) "
                          "WHERE augmenter = 'loud'").to_pylist()  # fmt: skip
        back = lake.arrow("SELECT text FROM views WHERE augmenter = 'back' ORDER BY text").to_pylist()
    assert all(row["text"] == row["source"].upper() + "!!" for row in loud)
    assert [row["text"] for row in back] == sorted(SENTENCES[:6]), "two mirrors give the sentence back"
    assert summary["snapshot"]["n_pairs"] == 6


def test_a_plugin_objective_is_built_by_its_entry(plugin, monkeypatch):
    from viewmill.train.assembly import build_objective

    config = TrainConfig(objective="echo", steps=2, head_warmup_steps=0)
    module, exported = build_objective(config, sentence_model=None)
    assert type(module).__name__ == "Echo" and exported == ["echo"]


def test_unknown_names_list_what_is_registered(plugin):
    assert ENGINES.help().startswith("apertium, hf, ctranslate2") and ENGINES.help().endswith(", mirror")
    with pytest.raises(EngineError, match=f"unknown engine 'moses': use one of {ENGINES.help()}$"):
        make_engine("moses", "en", "es")
    with pytest.raises(ValueError, match="unknown objective 'simcse': use one of bsl, .*distill, echo"):
        TrainConfig(objective="simcse")
    recipe = plugin / "bad.yaml"
    recipe.write_text(
        "name: r\ncorpus: {format: tsv, files: [c.txt]}\naugmenters: [{name: a, method: yell}, {name: b, "
        "method: identity}]\npair: {view_a: a, view_b: b}\n",
        encoding="utf-8",
    )
    with pytest.raises(RecipeError) as err:
        load_recipe(recipe)
    assert "corpus.format: unknown corpus format 'tsv' (did you mean 'csv'?): use one of text, book" in str(err.value)
    methods = "backtranslation, forward, identity, synonym, mlm, entailment, gloss, shout"
    assert f"augmenters.0: unknown augmenter method 'yell': use one of {methods}" in str(err.value)


def test_a_plugin_that_takes_a_builtin_name_is_refused(tmp_path, monkeypatch):
    entry_points = "[viewmill.augmenters]\nidentity = viewmill_test_plugin:Shout\n"
    install_test_plugin(tmp_path / "site", monkeypatch, entry_points)
    with pytest.raises(RegistryError, match="a plugin registers augmenter method 'identity'.*rename it"):
        AUGMENTERS.names()


def test_a_plugin_entry_of_the_wrong_kind_is_refused(tmp_path, monkeypatch):
    install_test_plugin(tmp_path / "site", monkeypatch, "[viewmill.engines]\nbroken = viewmill_test_plugin:Shout\n")
    with pytest.raises(EngineError, match="engine 'broken'.*must be a viewmill.augment.engines.Engine"):
        make_engine("broken", "en", "es")


def test_the_cli_lists_what_recipes_can_name(plugin):
    from typer.testing import CliRunner
    from viewmill.pipelines.cli.app import app

    result = CliRunner().invoke(app, ["plugins"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    methods = "backtranslation, forward, identity, synonym, mlm, entailment, gloss, shout"
    assert f"augmenter methods [viewmill.augmenters]: {methods}" in lines
    assert f"engines [viewmill.engines]: {ENGINES.help()}" in lines and ENGINES.help().endswith(", mirror")
    objectives = "bsl, ntxent, infonce, sgopt, isbert, distill, infonce-distill, echo"
    assert f"objectives [viewmill.objectives]: {objectives}" in lines
    formats = "text, book, senteval, nli-jsonl, csv, parquet, hf, pipe-pairs, pipes"
    assert f"corpus formats [viewmill.readers]: {formats}" in lines


PAIRS = [(SENTENCES[i], SENTENCES[i + 4], label) for i, label in enumerate(["entailment", "neutral"] * 2)]


def test_a_plugin_augmenter_skips_the_filters_and_gets_nli_pairs_from_a_plugin_format(plugin):
    (plugin / "pairs.txt").write_text("\n".join("|".join(pair) for pair in PAIRS), encoding="utf-8")
    recipe = plugin / "r.yaml"
    augmenters = "[{name: gloss, method: gloss}, {name: loud, method: shout}]"
    body = f"augmenters: {augmenters}\npair: {{view_a: gloss, view_b: loud}}\n"
    recipe.write_text(f"name: nli\ncorpus: {{format: pipes, files: [pairs.txt]}}\n{body}", encoding="utf-8")
    with pytest.raises(RecipeError, match="the gloss augmenter needs labelled NLI data: corpus.format is 'pipes', "
                                          "use one of senteval, nli-jsonl, pipe-pairs$"):  # fmt: skip
        load_recipe(recipe)
    recipe.write_text(f"name: nli\ncorpus: {{format: pipe-pairs, files: [pairs.txt]}}\n{body}", encoding="utf-8")
    state = StatePaths(plugin / "state")
    summary = run_recipe(RunContext(load_recipe(recipe), state), train=False)

    with Lake(state.lake, read_only=True) as lake:
        links = lake.arrow("SELECT premise_text, hypothesis_text, label FROM nli_pairs ORDER BY premise_text")
        views = lake.arrow("SELECT v.text, v.status, v.reject_reason, v.provenance, s.text AS source FROM views v "
                           "JOIN sentences s USING (sentence_id) WHERE augmenter = 'gloss'").to_pylist()  # fmt: skip
    assert sorted(zip(*links.to_pydict().values(), strict=True)) == sorted(PAIRS), "ingest collected the links"
    kept = [v for v in views if v["status"] == "kept"]
    assert sorted(v["source"] for v in kept) == sorted(premise for premise, _, _ in PAIRS)
    assert [v["reject_reason"] for v in views if v["status"] != "kept"] == ["no_nli_pair"] * 4, "the hypotheses"
    for view in kept:
        assert view["provenance"] == {"engines": ["gloss"], "models": [], "decoding": None, "cache_keys": []}
        unexempt = reject_reason(view["text"], quality_signals(view["source"], view["text"]), FilterSpec())
        assert unexempt is not None and unexempt.startswith("length_ratio>"), "kept only because it opted out"
    assert summary["snapshot"]["n_pairs"] == 4


def test_plugin_capabilities_reach_the_meaning_filter_and_the_report(plugin):
    assert augmenter_class("gloss").exempt_from_filters and not augmenter_class("shout").exempt_from_filters
    assert not augmenter_class("uninstalled").exempt_from_filters, "views of a removed plugin: the defaults"
    embed = lambda texts: np.array([[1.0, 0.0] if t == "a source" else [0.0, 1.0] for t in texts])  # noqa: E731
    verdicts = judge([Candidate("a source", "a view", "gloss"), Candidate("a source", "a view", "shout")],
                     MeaningSpec(encoder="fake"), embed)  # fmt: skip
    assert [(v.cosine, v.reason) for v in verdicts] == [(0.0, None), (0.0, "cosine<0.7")]
    stored = CosineFilter("gloss", 1, 0.0, 0.0, 0.0, 0.0, 0.0, floor=0.7, ceiling=0.98, encoder="fake", values=[0.0])
    assert stored.exempt and "gloss: exempt, not filtered" in " ".join(markdown_lines("gloss", stored))
    assert READERS["pipe-pairs"].yields_nli_pairs and READERS["pipe-pairs"].reads_files
    assert not READERS["pipes"].reads_files, "a plain function is wrapped as before: its sources go to it unchecked"
    assert nli_formats() == ["senteval", "nli-jsonl", "pipe-pairs"]
