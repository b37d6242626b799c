"""Preflight resolves every encoder a run will load, so a wrong one is refused with exit 2
before ingest writes anything: the meaning filter's and the miner's load only later."""

from __future__ import annotations

from typer.testing import CliRunner
from viewmill.pipelines.cli.app import app

from tests.lake_state import lake_state, small_lake

runner = CliRunner()

RECIPE = """
name: encoders
corpus: {{files: [{corpus}]}}
augmenters: [{{name: a, method: identity}}, {{name: b, method: identity}}]
pair: {{view_a: a, view_b: b{negatives}}}
{filters}
"""


def _refused(tmp_path, *, negatives: str = "", filters: str = "") -> str:
    """The run's one-line error, after checking that it exited 2 and left the lake as it was."""
    state = tmp_path / "state"
    small_lake(state / "lake")
    before = lake_state(state / "lake")
    corpus = tmp_path / "c.txt"
    corpus.write_text("A man plays a guitar.\nTwo dogs run in a field.\n", encoding="utf-8")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(RECIPE.format(corpus=corpus, negatives=negatives, filters=filters), encoding="utf-8")
    result = runner.invoke(app, ["run", str(recipe), "--no-prefect", "--state-dir", str(state)])
    out = " ".join(result.output.split())  # rich wraps long lines
    assert result.exit_code == 2 and "Traceback" not in out, out
    assert lake_state(state / "lake") == before, "the lake changed"
    return out


def test_an_unknown_meaning_filter_encoder_is_refused_before_anything_is_written(tmp_path):
    out = _refused(tmp_path, filters="filters: {meaning: {encoder: 'embedded:all-MiniLM-L6-v3'}}")
    assert (
        "error: filters.meaning.encoder 'embedded:all-MiniLM-L6-v3' cannot be used: unknown embedded encoder "
        "'all-MiniLM-L6-v3': available: "
    ) in out
    assert (
        "set filters.meaning.encoder to an embedded:NAME encoder, a model directory (relative to the recipe) or a "
        "hub id, e.g. --set filters.meaning.encoder=embedded:all-MiniLM-L6-v2"
    ) in out


def test_a_mining_encoder_folder_that_is_no_model_is_refused_before_anything_is_written(tmp_path):
    folder = tmp_path / "not-a-model"
    folder.mkdir()
    out = _refused(tmp_path, negatives=f", negatives: {{source: mined, encoder: {folder}}}")
    assert (
        f"error: pair.negatives.encoder '{folder}' cannot be used: {folder} is not a transformers/sentence-"
        "transformers model directory (no config.json); set pair.negatives.encoder to an embedded:NAME encoder"
    ) in out
