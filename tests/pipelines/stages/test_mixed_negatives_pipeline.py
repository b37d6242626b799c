"""`pair.negatives.pairings` through a recipe run: NLI contradictions on the (premise,
entailed) pairs only, the (entailed, premise) pairs kept with none, and the stage's log line."""

import logging
from pathlib import Path

from viewmill.pipelines.recipe import load_recipe
from viewmill.pipelines.run import RunContext, run_recipe
from viewmill.pipelines.state import StatePaths
from viewmill.storage.lake import Lake
from viewmill.storage.snapshots import read_pairs

from tests.pipelines.stages.test_negatives_pipeline import CONTRADICTIONS, NLI, _recipe


def _mixed_recipe(folder: Path) -> Path:
    path = _recipe(folder, "{source: nli-contradiction}")
    text = path.read_text(encoding="utf-8").replace(
        "pair: {view_a: premise, view_b: entailed, negatives: {source: nli-contradiction}}",
        "pair: {pairings: [[premise, entailed], [entailed, premise]],\n"
        "       negatives: {source: nli-contradiction, pairings: [[premise, entailed]]}}",
    )
    path.write_text(text, encoding="utf-8")
    return path


def test_negatives_go_to_the_chosen_pairings_pairs_only(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="viewmill.pipelines.stages.pair"):
        summary = run_recipe(RunContext(load_recipe(_mixed_recipe(tmp_path)), StatePaths(tmp_path / "state")))
    name = summary["snapshot"]["name"]
    with Lake(tmp_path / "state" / "lake", read_only=True) as lake:
        pairs = read_pairs(lake, name).to_pylist()
    premises = {row[0] for row in NLI}
    forward = [p for p in pairs if p["text_a"] in premises]
    backward = [p for p in pairs if p["text_a"] not in premises]
    assert {p["text_a"] for p in forward} == {NLI[i][0] for i in (0, 2, 6)}, "the woman's premise has none: dropped"
    assert all(len(p["negatives"]) == 1 and set(p["negatives"]) <= CONTRADICTIONS[p["text_a"]] for p in forward)
    assert len(backward) == 4 and all(p["negatives"] == [] for p in backward), "every entailed-premise pair, none"
    assert f"pairs snapshot {name}: 7 pairs, 3 of them (pairings [premise, entailed]) with 1" in caplog.text
