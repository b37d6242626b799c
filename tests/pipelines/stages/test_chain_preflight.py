"""A chain with a hop no installed Apertium mode translates is refused by preflight (issue 31,
item 3): exit 2 before anything is written, naming the augmenter, its path and the apt-get
line that installs the missing pair, or, for a pair Debian does not ship, the chain to use."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner
from viewmill.pipelines.cli.app import app

from tests.conftest import needs_apertium
from tests.lake_state import lake_state, small_lake

pytestmark = needs_apertium
runner = CliRunner()
SYSTEM_MODES = Path("/usr/share/apertium/modes")

RECIPE = """
name: chain
corpus: {{files: [{corpus}]}}
augmenters:
  - {{name: en, method: identity}}
  - {{name: fwd_es, method: forward, target: es}}
  - {augmenter}
pair: {{pairings: [[en, fwd_es]]}}
"""


@pytest.fixture
def only_english_spanish(tmp_path, monkeypatch) -> Path:
    """An Apertium data folder whose modes are eng-spa and spa-eng only (links to the system's)."""
    modes = tmp_path / "apertium" / "modes"
    modes.mkdir(parents=True)
    for mode in ("eng-spa", "spa-eng"):
        (modes / f"{mode}.mode").symlink_to(SYSTEM_MODES / f"{mode}.mode")
    monkeypatch.setenv("APERTIUM_DATADIR", str(modes.parent))
    return modes


def _refused(tmp_path: Path, augmenter: str) -> str:
    """The run's one-line error, after checking that it exited 2 and left the lake as it was."""
    state = tmp_path / "state"
    small_lake(state / "lake")
    before = lake_state(state / "lake")
    corpus = tmp_path / "c.txt"
    corpus.write_text("A man plays a guitar.\nTwo dogs run in a field.\n", encoding="utf-8")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(RECIPE.format(corpus=corpus, augmenter=augmenter), encoding="utf-8")
    result = runner.invoke(app, ["run", str(recipe), "--no-prefect", "--state-dir", str(state)])
    out = " ".join(result.output.split())  # rich wraps long lines
    assert result.exit_code == 2 and "Traceback" not in out, out
    assert lake_state(state / "lake") == before, "the lake changed"
    return out


def test_a_chain_through_a_pair_not_installed_is_refused_with_its_apt_get_line(tmp_path, only_english_spanish):
    out = _refused(tmp_path, "{name: fwd_fr, method: forward, pivots: [es, fr]}")
    assert (
        "error: augmenter fwd_fr (en>es>fr): apertium has no es>fr direction installed: "
        "sudo apt-get install apertium-fr-es (installed directions: eng-spa, spa-eng)"
    ) in out


def test_a_round_trip_hop_not_installed_is_refused_the_same_way(tmp_path, only_english_spanish):
    out = _refused(tmp_path, "{name: bt_it, method: backtranslation, path: [en, es, it, es, en]}")
    assert (
        "error: augmenter bt_it (en>es>it>es>en): apertium has no es>it direction installed: "
        "sudo apt-get install apertium-spa-ita (installed directions: eng-spa, spa-eng)"
    ) in out


def test_a_pair_debian_does_not_ship_is_refused_with_the_chain_that_reaches_it(tmp_path):
    out = _refused(tmp_path, "{name: fwd_fr, method: forward, target: fr}")
    assert (
        "error: augmenter fwd_fr (en>fr): Debian ships no Apertium package for en>fr: chain through a language "
        "both reach, e.g. pivots: [es] on a forward augmenter or path: [en, es, fr, ...]"
    ) in out
