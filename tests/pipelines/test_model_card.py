"""The model card a recipe run publishes (issue 23.7): the published folder's name (never the
staging folder's), every score the run evaluated with hub data set ids where known, files
readable as the umask allows, no lock files left beside the model."""

from __future__ import annotations

import json
import os
from pathlib import Path

from viewmill.pipelines.recipe import load_recipe
from viewmill.pipelines.run import RunContext, run_recipe
from viewmill.pipelines.state import StatePaths
from viewmill.storage.lake import Lake

from tests.conftest import needs_apertium, write_sts_fixture, write_tiny_recipe


def _recipe(folder: Path, tiny_model: Path) -> Path:
    """The tiny recipe with STS-B dev for selection, and STS-B test plus a file of its own evaluated."""
    recipe = write_tiny_recipe(folder, tiny_model)
    stsb = folder / "data" / "stsbenchmark"
    stsb.mkdir(parents=True)
    write_sts_fixture(stsb / "sts-dev.csv")
    rows = [line.split("\t") for line in write_sts_fixture(stsb / "sts-test.csv").read_text().splitlines()]
    scores = [row[4] for row in rows][::-1]  # other gold scores: a test value unlike the dev one
    (stsb / "sts-test.csv").write_text(
        "".join("\t".join([*r[:4], s, *r[5:]]) + "\n" for r, s in zip(rows, scores, strict=True))
    )
    text = recipe.read_text(encoding="utf-8").replace(
        "evaluate:\n  tasks: [{name: sts-fixture, format: stsb, path: sts.csv}]",
        "  dev: {name: stsb-dev, format: stsb, path: data/stsbenchmark/sts-dev.csv}\n"
        "evaluate:\n"
        "  tasks:\n"
        "    - {name: stsb-test, format: stsb, path: data/stsbenchmark/sts-test.csv}\n"
        "    - {name: sts-fixture, format: stsb, path: sts.csv}\n",
    )
    recipe.write_text(text, encoding="utf-8")
    return recipe


@needs_apertium
def test_the_published_card_names_the_model_and_holds_every_score_of_its_run(tmp_path, tiny_model):
    from huggingface_hub import ModelCard

    state = StatePaths(tmp_path / "state")
    summary = run_recipe(RunContext(load_recipe(_recipe(tmp_path, tiny_model)), state))
    model = Path(summary["train"]["path"])
    card = ModelCard.load(model / "README.md")
    name = model.name
    assert not name.endswith(".staged") and ".staged" not in card.content
    assert card.data.model_name == name and f"# {name}\n" in card.text
    assert f'model = SentenceTransformer("{name}")' in card.text
    assert card.data.datasets is None, "a corpus of one's own files is no hub data set (not the recipe's name)"
    assert card.data.base_model is None, "a local base model folder is no hub id"

    manifest = json.loads((model / "viewmill.json").read_text())
    dev_score = dict(manifest["report"]["dev_evals"])[manifest["selected_step"]]
    with Lake(state.lake, read_only=True) as lake:
        stored = dict(lake.con.execute(
            "SELECT task, value FROM evals WHERE model = ? AND subset = 'all'", [summary["train"]["model_id"]]
        ).fetchall())  # fmt: skip
    assert set(stored) == {"stsb-test", "sts-fixture"} and round(stored["stsb-test"], 2) != round(dev_score, 2)
    index = {
        r.dataset_name: (r.dataset_type, r.dataset_split, r.metric_type, r.metric_value) for r in card.data.eval_results
    }
    assert index == {
        "stsb-dev": ("mteb/stsbenchmark-sts", "validation", "spearman_cosine", round(dev_score, 4)),
        "stsb-test": ("mteb/stsbenchmark-sts", "test", "spearman_cosine", round(stored["stsb-test"], 4)),
    }, "the model-index holds every score whose data set has a hub id"
    assert f"| sts-fixture | own files (no hub id) |  | spearman_cosine_x100 | {stored['sts-fixture']:.2f} | 6 |" in (
        card.text
    ), "a file of one's own is in the card's table"
    assert manifest["train_config"]["dev"]["split"] is None

    umask = os.umask(0)
    os.umask(umask)
    modes = {p.relative_to(model).as_posix(): p.stat().st_mode & 0o777 for p in model.rglob("*") if p.is_file()}
    assert set(modes.values()) == {0o666 & ~umask}, modes  # model.safetensors too, not 0600
    assert [p.name for p in state.models.iterdir()] == [name], "no .lock, .staged or checkpoint left beside it"

    again = run_recipe(RunContext(load_recipe(tmp_path / "tiny.yaml"), state))
    assert again["train"]["reused"] is True
    assert ModelCard.load(model / "README.md").content == card.content, "a rerun writes the same card"
