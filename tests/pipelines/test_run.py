"""The whole recipe through the plain stage functions: real Apertium, real DuckLake, tiny model."""

import shutil
from pathlib import Path

import pytest
from viewmill.augment.engines import EngineError
from viewmill.augment.ingest.corpus import CorpusError
from viewmill.pipelines.recipe import load_recipe
from viewmill.pipelines.run import RunContext, run_recipe
from viewmill.pipelines.state import StatePaths
from viewmill.storage.lake import Lake

from tests.conftest import needs_apertium

pytestmark = needs_apertium


def test_full_run_fills_every_table_and_a_rerun_reuses_everything(tmp_path, tiny_recipe):
    state = StatePaths(tmp_path / "state")
    first = run_recipe(RunContext(load_recipe(tiny_recipe), state))
    assert first["ingest"]["sentences"] == 20 and first["ingest"]["duplicates"] == 1
    assert {r["new_views"] for r in first["augment"].values()} == {20}
    assert first["snapshot"]["created"] and first["snapshot"]["n_pairs"] > 10
    assert not first["train"]["reused"]
    assert [e["model"] for e in first["evals"]] == ["untrained", "trained"]
    card = (Path(first["train"]["path"]) / "README.md").read_text()
    trained = next(e for e in first["evals"] if e["model"] == "trained")
    row = f"| sts-fixture | own files (no hub id) |  | spearman_cosine_x100 | {trained['value']:.2f} |"
    assert "`evals` table" in card and row in card, "the run's scores are in the lake and in its model's card"

    with Lake(state.lake, read_only=True) as lake:
        counts = {t: lake.scalar(f"SELECT count(*) FROM {t}") for t in ("sentences", "views", "pairs", "models")}
        assert counts == {"sentences": 20, "views": 40, "pairs": first["snapshot"]["n_pairs"], "models": 1}
        assert lake.scalar("SELECT count(*) FROM translations") == lake.scalar(
            "SELECT count(DISTINCT cache_key) FROM translations"
        )
        run = lake.arrow("SELECT status, flow, counts FROM runs").to_pylist()
        assert run[0]["status"] == "succeeded" and '"pairs":' in run[0]["counts"]
        assert lake.scalar("SELECT count(*) FROM evals") == 2
        translations = lake.scalar("SELECT count(*) FROM translations")

    second = run_recipe(RunContext(load_recipe(tiny_recipe), state))
    assert all(r["new_views"] == 0 and r["reused_views"] == 20 for r in second["augment"].values())
    assert all(r["cache"]["misses"] == 0 for r in second["augment"].values())
    assert not second["snapshot"]["created"] and second["snapshot"]["name"] == first["snapshot"]["name"]
    assert second["train"]["reused"] and all(e["reused"] for e in second["evals"])
    assert [e["value"] for e in second["evals"]] == [e["value"] for e in first["evals"]]
    with Lake(state.lake, read_only=True) as lake:
        assert lake.scalar("SELECT count(*) FROM translations") == translations
        assert lake.scalar("SELECT count(*) FROM runs WHERE status = 'succeeded'") == 2
    assert (Path(first["train"]["path"]) / "README.md").read_text() == card, "evaluation never rewrites the card"


@pytest.mark.parametrize("problem", ["not_utf8", "empty", "missing", "no_apertium_pair"])
def test_bad_input_fails_before_anything_but_its_run_is_written(tmp_path, tiny_recipe, problem):
    corpus = tiny_recipe.parent / "corpus.txt"
    expected: type[Exception] = CorpusError
    if problem == "not_utf8":
        corpus.write_bytes(corpus.read_bytes() + b"caf\xe9 au lait ok\n")
    elif problem == "empty":
        corpus.write_text("\n\n", encoding="utf-8")
    elif problem == "missing":
        corpus.unlink()
    else:
        tiny_recipe.write_text(tiny_recipe.read_text().replace("[en, ca, en]", "[en, fr, en]"))
        expected = EngineError
    state = StatePaths(tmp_path / "state")
    with pytest.raises(expected):
        run_recipe(RunContext(load_recipe(tiny_recipe), state))
    if problem != "empty":
        assert not state.lake.exists(), "refused by preflight: nothing written"
        return
    with Lake(state.lake, read_only=True) as lake:  # only ingest's full read finds it: the run's own row, failed
        (run,) = lake.arrow("SELECT status, error FROM runs").to_pylist()
        assert run["status"] == "failed" and run["error"].startswith("CorpusError: corpus 'tiny' is empty")
        assert lake.scalar("SELECT count(*) FROM sentences") == 0


def test_apertium_missing_is_reported_with_the_install_command(tmp_path, tiny_recipe, monkeypatch):
    import viewmill.augment.apertium as engines

    engines.apertium_modes.cache_clear()
    monkeypatch.setattr(shutil, "which", lambda name: None)
    try:
        with pytest.raises(EngineError, match="Apertium is not installed: apt-get install apertium"):
            run_recipe(RunContext(load_recipe(tiny_recipe), StatePaths(tmp_path / "state")))
    finally:
        engines.apertium_modes.cache_clear()
    assert not (tmp_path / "state").exists()


def test_a_failing_stage_is_recorded_as_a_failed_run(tmp_path, tiny_recipe):
    recipe = load_recipe(tiny_recipe)
    recipe.train.batch_size = 64  # more than the 20 pairs: training refuses
    state = StatePaths(tmp_path / "state")
    with pytest.raises(ValueError, match="fewer than one batch"):
        run_recipe(RunContext(recipe, state))
    with Lake(state.lake, read_only=True) as lake:
        run = lake.arrow("SELECT status, error FROM runs").to_pylist()
        assert run[0]["status"] == "failed" and "fewer than one batch" in run[0]["error"]
        assert lake.scalar("SELECT count(*) FROM snapshots") == 1  # finished stages stay committed


def test_changed_evaluation_data_is_evaluated_again(tmp_path, tiny_recipe):
    state = StatePaths(tmp_path / "state")
    run_recipe(RunContext(load_recipe(tiny_recipe), state))
    sts = tiny_recipe.parent / "sts.csv"
    sts.write_text(sts.read_text() + "main-captions\tMSRvid\t2012test\t0099\t2.0\tA cat.\tA dog sat.\n")
    again = run_recipe(RunContext(load_recipe(tiny_recipe), state))
    assert not any(e["reused"] for e in again["evals"]) and {e["n"] for e in again["evals"]} == {7}


@needs_apertium
def test_skipped_malformed_lines_are_counted_in_the_run_record(tmp_path, tiny_recipe):
    import json

    corpus = tiny_recipe.parent / "corpus.txt"
    corpus.write_bytes(corpus.read_bytes() + b"a caf\xe9 line in latin-1\n")
    text = tiny_recipe.read_text().replace("min_words: 3}", "min_words: 3, on_error: skip}")
    tiny_recipe.write_text(text.split("train:")[0])  # ingest, augment and pair are enough here
    state = StatePaths(tmp_path / "state")
    run_recipe(RunContext(load_recipe(tiny_recipe), state))
    with Lake(state.lake, read_only=True) as lake:
        counts = json.loads(lake.scalar("SELECT counts FROM runs"))
    assert counts["ingest"]["malformed"] == 1
    assert counts["ingest"]["malformed_examples"][0].startswith(f"{corpus}:23: not valid UTF-8")


@pytest.mark.parametrize("released", [0, 1])
def test_cycles_are_collected_before_training_only_where_the_run_dropped_a_model(
    tmp_path, tiny_recipe, monkeypatch, released
):
    import viewmill.pipelines.run as run

    calls = []
    monkeypatch.setattr(run, "release_models", lambda: released)
    monkeypatch.setattr(run, "release_dropped_models", lambda: calls.append("collected"))
    run_recipe(RunContext(load_recipe(tiny_recipe), StatePaths(tmp_path / "state")), evaluate=False)
    assert calls == (["collected"] if released else [])
