"""The model card a recipe run publishes (issue 23.7): the published folder's name (never the
staging folder's), every score the run evaluated with hub data set ids where known, files
readable as the umask allows, no lock files left beside the model."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from viewmill.pipelines.recipe import load_recipe
from viewmill.pipelines.run import RunContext, run_recipe
from viewmill.pipelines.state import StatePaths
from viewmill.storage.lake import Lake
from viewmill.train.export import model_id_of
from viewmill.train.manifest import check_files

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
        r.dataset_name: (r.task_type, r.task_name, r.dataset_type, r.dataset_split, r.metric_type, r.metric_name,
                         r.metric_value)
        for r in card.data.eval_results
    }  # fmt: skip
    similarity = ("semantic-similarity", "Semantic Similarity")
    assert index == {
        "stsb-test": (*similarity, "mteb/stsbenchmark-sts", "test", "spearman_cosine", "Spearman Cosine",
                      round(stored["stsb-test"] / 100, 6)),
        "sts-fixture": (*similarity, "sts-fixture", None, "spearman_cosine", "Spearman Cosine",
                        round(stored["sts-fixture"] / 100, 6)),
        "stsb-dev": (*similarity, "mteb/stsbenchmark-sts", "validation", "spearman_cosine", "Spearman Cosine",
                     round(dev_score / 100, 6)),
    }, "every evaluated task and the dev score, on 0-1 as in sentence-transformers' cards"  # fmt: skip
    assert all(0 <= abs(r.metric_value) <= 1 for r in card.data.eval_results)
    assert f"| sts-fixture | own files (no hub id) |  | spearman_cosine_x100 | {stored['sts-fixture']:.2f} | 6 |" in (
        card.text
    ), "a file of one's own is in the card's table"
    assert "Not evaluated by its run yet" not in card.text and "Scored by the run that trained it" in card.text
    assert manifest["train_config"]["dev"]["split"] is None
    assert {row["task"]: row["value"] for row in manifest["evaluation"]} == stored, "the manifest records them"
    assert check_files(model, manifest, "fix") is True, "the file hashes still vouch for the folder"
    assert model_id_of(str(model)) == summary["train"]["model_id"]

    umask = os.umask(0)
    os.umask(umask)
    modes = {p.relative_to(model).as_posix(): p.stat().st_mode & 0o777 for p in model.rglob("*") if p.is_file()}
    assert set(modes.values()) == {0o666 & ~umask}, modes  # model.safetensors too, not 0600
    assert [p.name for p in state.models.iterdir()] == [name], "no .lock, .staged or checkpoint left beside it"

    again = run_recipe(RunContext(load_recipe(tmp_path / "tiny.yaml"), state))
    assert again["train"]["reused"] is True
    assert ModelCard.load(model / "README.md").content == card.content, "a rerun writes the same card"


def test_an_export_with_the_weights_it_started_from_is_not_scored_again(tmp_path, tiny_model, monkeypatch):
    """Issue 33.3: an export whose weights are the start's, tensor for tensor (selected step 0), gets the
    start's rows, stored under its own id with a label saying whose they are; changed weights are scored."""
    import torch
    from rich.console import Console
    from viewmill.pipelines.cli.report import render_summary
    from viewmill.pipelines.stages import evaluate
    from viewmill.train.encoder import load_sentence_model
    from viewmill.train.evaluation.sts import StsTask

    model = load_sentence_model(str(tiny_model))
    model.save(str(tmp_path / "same"), create_model_card=False)  # saved again, as an export is: other bytes
    with torch.no_grad():
        next(model.parameters()).view(-1)[0] += 1e-3
    model.save(str(tmp_path / "changed"), create_model_card=False)
    tasks = [StsTask(name="sts-fixture", format="stsb", path=write_sts_fixture(tmp_path / "sts.csv"))]
    scored = []
    real_score = evaluate._score
    monkeypatch.setattr(evaluate, "_score", lambda target, *a, **k: scored.append(target.label) or real_score(
        target, *a, **k))  # fmt: skip
    start = evaluate.EvalTarget("untrained", str(tiny_model), "start-id")
    same = evaluate.EvalTarget("trained", str(tmp_path / "same"), "same-id", start=start)
    changed = evaluate.EvalTarget("changed", str(tmp_path / "changed"), "changed-id", start=start)
    with Lake(tmp_path / "lake") as lake:
        rows = evaluate.evaluate_models(lake, [start, same, changed], tasks, run_id="r1")
        stored = lake.arrow("SELECT model, model_label, value FROM evals ORDER BY model").to_pylist()
    assert scored == ["untrained", "changed"], "the export with the start's weights is not scored again"
    by_label = {row.model: row for row in rows}
    assert by_label["trained"].value == by_label["untrained"].value
    assert (by_label["trained"].reused, by_label["trained"].same_as) == (True, "untrained")
    assert by_label["changed"].same_as is None and by_label["changed"].reused is False
    assert [(r["model"], r["model_label"]) for r in stored] == [
        ("changed-id", "changed"), ("same-id", "trained (weights of untrained)"), ("start-id", "untrained")
    ]  # fmt: skip

    console = Console(record=True, width=200)
    render_summary({"run_id": "r1", "timings": {}, "evals": [dataclasses.asdict(row) for row in rows]}, console)
    assert "trained: its weights are untrained's, tensor for tensor: untrained's scores are shown for it, not scored " \
           "again" in console.export_text()  # fmt: skip
