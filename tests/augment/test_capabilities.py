"""What augmenters and corpus formats may do is read from their registered entries, not their
names; producers get one `ProduceContext`; a view's provenance is a typed `Provenance`,
stored as the lake's struct. Producers written against the old produce(lake, chunk, run_id,
stats) still run, adapted with a warning."""

import warnings
from pathlib import Path
from typing import Literal

import pytest
from pydantic import ValidationError
from viewmill.augment.augmenters import (
    AUGMENTERS,
    AugmenterConfig,
    ProduceContext,
    ProducedView,
    Provenance,
    augmenter_class,
    make_producer,
)
from viewmill.augment.cache import CacheStats
from viewmill.augment.ingest.readers import READERS, nli_formats, split_in_name
from viewmill.pipelines.recipe import RecipeError, load_recipe
from viewmill.storage.schema import PROVENANCE


def test_the_builtin_capabilities_are_what_the_name_lists_said():
    def having(flag: str) -> list[str]:
        return [method for method in AUGMENTERS.names() if getattr(augmenter_class(method), flag)]

    assert having("exempt_from_filters") == ["identity", "entailment"]
    assert having("is_source_copy") == ["identity"]
    assert having("needs_nli_links") == ["entailment"]
    assert "exempt_from_filters" not in AUGMENTERS.get("identity").model_fields, "no field: hashes unchanged"
    formats = {name: READERS.get(name) for name in READERS.names()}
    assert [name for name, r in formats.items() if r.reads_files] == [
        "text", "book", "senteval", "nli-jsonl", "csv", "parquet"]  # fmt: skip
    assert [name for name, r in formats.items() if r.needs_text_column] == ["csv", "parquet", "hf"]
    assert nli_formats() == ["senteval", "nli-jsonl"]


def test_a_reader_of_names_gets_its_sources_as_written_and_a_column_reader_needs_its_column(tmp_path):
    (tmp_path / "saved").mkdir()
    recipe = tmp_path / "r.yaml"
    rest = "augmenters: [{name: a, method: identity}, {name: b, method: synonym}]\npair: {view_a: a, view_b: b}\n"
    recipe.write_text(f"name: r\ncorpus: {{format: hf, text_column: t, files: [org/data, saved]}}\n{rest}")
    assert load_recipe(recipe).corpus.files == [Path("org/data"), tmp_path / "saved"], "a hub id, a local folder"
    recipe.write_text(f"name: r\ncorpus: {{format: text, files: [org/data]}}\n{rest}")
    assert load_recipe(recipe).corpus.files == [tmp_path / "org/data"], "a file reader's source is a path"
    recipe.write_text(f"name: r\ncorpus: {{format: parquet, files: [c.parquet]}}\n{rest}")
    with pytest.raises(RecipeError, match="format parquet needs text_column"):
        load_recipe(recipe)


def test_a_readers_split_and_link_files(tmp_path):
    for name in ("s1.dev", "s2.dev", "s1.val", "labels.dev"):
        (tmp_path / name).write_text("x\n", encoding="utf-8")
    senteval, text = READERS.get("senteval"), READERS.get("text")
    assert senteval.split_of(str(tmp_path / "s1.val")) == "val" and text.split_of("s1.val") is None
    assert split_in_name("snli_1.0_dev.jsonl") == "dev" and split_in_name("mnli_dev_matched.jsonl") == "dev_matched"
    assert senteval.link_files([tmp_path / "s1.dev"]) == [tmp_path / "s2.dev"]
    assert senteval.link_files([tmp_path / "s1.dev", tmp_path / "s2.dev"]) == [], "listed: read anyway"
    assert senteval.link_files([tmp_path / "s1.val"]) == [], "no s2.val beside it"
    assert text.link_files([tmp_path / "s1.dev"]) == []


def test_provenance_is_the_lakes_struct_and_refuses_unknown_keys():
    assert list(Provenance.model_fields) == [field.name for field in PROVENANCE], "stored rows keep their shape"
    assert Provenance().model_dump() == {"engines": [], "models": [], "decoding": None, "cache_keys": []}
    assert ProducedView("x", {"engines": ["e"]}).provenance == Provenance(engines=["e"]), "a dict is validated"
    with pytest.raises(ValidationError, match="model\n  Extra inputs are not permitted"):
        ProducedView("x", {"engines": ["e"], "model": ["m"]})
    with pytest.raises(ValidationError, match="frozen"):
        Provenance().engines = ["e"]  # type: ignore[misc]


class Old(AugmenterConfig):
    method: Literal["old"] = "old"

    def producer(self, lake):
        return OldProducer()


class OldProducer:
    lang, identity = None, ["old-1"]

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def produce(self, lake, chunk, run_id, stats):
        self.calls.append((lake, run_id, stats))
        stats.hits += len(chunk)
        return [ProducedView(text[::-1], {"engines": ["old"]}) for _, text in chunk]

    def close(self) -> None:
        self.calls.append(("closed",))


class New(Old):
    method: Literal["new"] = "new"  # type: ignore[assignment]

    def producer(self, lake):
        return NewProducer()


class NewProducer(OldProducer):
    def produce(self, chunk, ctx):
        return [ProducedView(text, Provenance(engines=["new"])) for _, text in chunk]


def test_a_producer_with_the_old_signature_is_adapted_with_a_warning():
    lake, stats = object(), CacheStats()
    ctx = ProduceContext(lake, "run-1", stats)  # type: ignore[arg-type]
    fix = r"OldProducer.produce\(lake, chunk, run_id, stats\).*produce\(self, chunk, ctx\) and read ctx.lake"
    with pytest.warns(DeprecationWarning, match=fix):
        producer = make_producer(Old(name="o"))
    assert (producer.identity, producer.lang) == (["old-1"], None)
    views = producer.produce([("s1", "abc"), ("s2", "de")], ctx)
    assert [(v.text, v.provenance) for v in views] == [("cba", Provenance(engines=["old"])),
                                                       ("ed", Provenance(engines=["old"]))]  # fmt: skip
    assert stats.hits == 2, "the old producer counted into the context's cache stats"
    producer.close()
    assert producer.producer.calls == [(lake, "run-1", stats), ("closed",)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        current = make_producer(New(name="n"))
    assert isinstance(current, NewProducer), "a current producer is used as it is"
