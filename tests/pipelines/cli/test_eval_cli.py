"""`viewmill eval`: several models and their baselines on a suite, side by side."""

import json
import logging
import shutil
from pathlib import Path

from typer.testing import CliRunner
from viewmill.pipelines.cli.app import app
from viewmill.pipelines.recipe import load_recipe
from viewmill.pipelines.run import RunContext, run_recipe
from viewmill.pipelines.state import StatePaths
from viewmill.storage.lake import Lake
from viewmill.train.config import TrainConfig
from viewmill.train.encoder import encoder_fingerprint
from viewmill.train.loop import train_model

from tests.conftest import SENTENCES, build_tiny_sentence_model, needs_apertium, write_sts_fixture

runner = CliRunner()


def _suite(tmp_path):
    write_sts_fixture(tmp_path / "sts.csv")
    year = tmp_path / "STS16-en-test"
    year.mkdir()
    for name, scores in (("a", ["1", "", "3", "4"]), ("b", ["2", "5", "1", "3"])):
        (year / f"STS.input.{name}.txt").write_text(
            "".join(f"{SENTENCES[i]}\t{SENTENCES[i + 1]}\n" for i in range(4)), encoding="utf-8"
        )
        (year / f"STS.gs.{name}.txt").write_text("\n".join(scores) + "\n", encoding="utf-8")
    mr = tmp_path / "MR"
    mr.mkdir()
    (mr / "rt-polarity.pos").write_text("".join(f"good great fine {s}\n" for s in SENTENCES[:10]), encoding="utf-8")
    (mr / "rt-polarity.neg").write_bytes("".join(f"bad awful poor {s}\n" for s in SENTENCES[10:]).encode("latin-1"))
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        "tasks:\n"
        "  - {name: STS16, format: senteval-sts, path: STS16-en-test}\n"
        "  - {name: fixture, format: stsb, path: sts.csv}\n"
        "  - {name: MR, format: senteval-transfer, task: MR, path: MR, folds: 2, inner_folds: 2}\n",
        encoding="utf-8",
    )
    return suite


def test_eval_prints_the_papers_table_and_stores_every_row(tmp_path, tiny_model):
    suite = _suite(tmp_path)
    state, out = tmp_path / "state", tmp_path / "reports"
    args = ["eval", str(tiny_model), "--suite", str(suite), "--state-dir", str(state), "--out", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "| model | STS16 | fixture | MR | Avg. |" in result.output
    label = tiny_model.name
    assert f"| {label} |" in result.output and "(mean pooling) |" in result.output and "([CLS]) |" in result.output
    assert "STS16: all subsets concatenated (7 pairs)" in result.output
    assert len(list(out.glob("eval-*.png"))) == 1 and len(list(out.glob("eval-*.md"))) == 1
    with Lake(state / "lake", read_only=True) as lake:
        rows = lake.arrow("SELECT model_label, task, subset, metric FROM evals").to_pylist()
    subsets = {r["subset"] for r in rows if r["task"] == "STS16"}
    assert subsets == {"a", "b", "all", "mean"}
    assert {r["metric"] for r in rows if r["task"] == "MR"} == {"accuracy_x100"}
    assert len({r["model_label"] for r in rows}) == 3
    again = runner.invoke(app, args)
    with Lake(state / "lake", read_only=True) as lake:
        assert lake.scalar("SELECT count(*) FROM evals") == len(rows), "stored results are reused"
    assert again.exit_code == 0


def test_eval_with_a_broken_suite_names_the_field(tmp_path, tiny_model):
    suite = tmp_path / "suite.yaml"
    suite.write_text("tasks:\n  - {name: x, format: senteval-sts, pth: y}\n", encoding="utf-8")
    result = runner.invoke(app, ["eval", str(tiny_model), "--suite", str(suite), "--state-dir", str(tmp_path)])
    assert result.exit_code == 2 and "suite" in result.output and "pth" in result.output
    missing = tmp_path / "suite2.yaml"
    missing.write_text("tasks:\n  - {name: x, format: senteval-sts, path: nowhere}\n", encoding="utf-8")
    result = runner.invoke(app, ["eval", str(tiny_model), "--suite", str(missing), "--state-dir", str(tmp_path)])
    assert result.exit_code == 2 and "STS folder not found" in result.output


def _sts_suite(tmp_path):
    """STS16 (two subsets) and the STS-B fixture: quick to score."""
    _suite(tmp_path)
    suite = tmp_path / "sts-suite.yaml"
    suite.write_text(
        "tasks:\n"
        "  - {name: STS16, format: senteval-sts, path: STS16-en-test}\n"
        "  - {name: fixture, format: stsb, path: sts.csv}\n",
        encoding="utf-8",
    )
    return suite


def test_re_evaluation_replaces_its_rows(tmp_path, tiny_model):
    suite = _sts_suite(tmp_path)
    state = tmp_path / "state"
    args = ["eval", str(tiny_model), "--suite", str(suite), "--state-dir", str(state), "--out", str(tmp_path / "r"),
            "--no-baselines"]  # fmt: skip
    query = "SELECT model, task, subset, metric, value, run_id FROM evals ORDER BY task, subset"
    assert runner.invoke(app, args).exit_code == 0
    with Lake(state / "lake", read_only=True) as lake:
        first = lake.arrow(query).to_pylist()
    gold = tmp_path / "STS16-en-test" / "STS.gs.b.txt"
    gold.write_text("5\n1\n4\n2\n", encoding="utf-8")  # new gold scores: STS16 is scored again
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    with Lake(state / "lake", read_only=True) as lake:
        second = lake.arrow(query).to_pylist()
        duplicates = lake.arrow(
            "SELECT model, task, subset, metric FROM evals GROUP BY ALL HAVING count(*) > 1"
        ).num_rows
    assert duplicates == 0 and len(second) == len(first) == 5  # STS16 a, b, all, mean + fixture all
    assert [r for r in second if r["task"] == "fixture"] == [r for r in first if r["task"] == "fixture"]
    redone = {r["subset"]: r for r in second if r["task"] == "STS16"}
    before = {r["subset"]: r for r in first if r["task"] == "STS16"}
    assert redone["b"]["value"] != before["b"]["value"] and redone["b"]["run_id"] != before["b"]["run_id"]


@needs_apertium
def test_eval_never_writes_into_the_model_and_joins_its_lineage(tmp_path, tiny_recipe):
    state = StatePaths(tmp_path / "state")
    summary = run_recipe(RunContext(load_recipe(tiny_recipe), state), evaluate=False)
    model = Path(summary["train"]["path"])

    def contents():
        return {p.relative_to(model): p.read_bytes() for p in model.rglob("*") if p.is_file()}

    before = contents()
    args = ["eval", str(model), "--suite", str(_sts_suite(tmp_path)), "--state-dir", str(state.root),
            "--out", str(tmp_path / "reports")]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert contents() == before, "evaluation leaves the model directory (card included) as it was"
    assert len(list((tmp_path / "reports").glob("eval-*.md"))) == 1
    with Lake(state.lake, read_only=True) as lake:
        joined = lake.arrow(
            "SELECT DISTINCT m.model_id, m.path FROM evals e JOIN models m ON m.model_id = e.model"
        ).to_pylist()
    assert joined == [{"model_id": summary["train"]["model_id"], "path": f"models/{model.name}"}]


# -- a model's identity is checked against its files (issue 21.6) -----------------------------
EVALS = "SELECT model, task, subset, value, run_id FROM evals ORDER BY model, task, subset"


def _exported(tmp_path: Path, tiny_model: Path) -> Path:
    """A viewmill export (two BSL steps from the tiny model) whose manifest names model-a."""
    out = tmp_path / "model-a"
    card = {"recipe": "t", "snapshot": "t@1", "base_model": str(tiny_model), "model_id": "model-a", "path": str(out)}
    config = TrainConfig(steps=2, batch_size=8, head_warmup_steps=1, options={"predictor_k": 2}, encoder_lr=1e-2)
    train_model([(s, s.lower()) for s in SENTENCES], str(tiny_model), config, out, card=card)
    return out


def _eval(tmp_path: Path, model: Path):
    suite = tmp_path / "sts-suite.yaml"
    suite = suite if suite.is_file() else _sts_suite(tmp_path)
    args = ["eval", str(model), "--suite", str(suite), "--state-dir", str(tmp_path / "state"),
            "--out", str(tmp_path / "reports"), "--no-baselines"]  # fmt: skip
    return runner.invoke(app, args)


def _evals(tmp_path: Path) -> list[dict]:
    with Lake(tmp_path / "state" / "lake", read_only=True) as lake:
        return lake.arrow(EVALS).to_pylist()


def _refusal(model: Path, file: str) -> str:
    return (
        f"error: {model / file} does not match the sha256 its viewmill.json recorded at export: this is not the "
        f"model model-a; remove {model / 'viewmill.json'} to evaluate the folder as a plain model, or export the "
        "model again"
    )


def test_a_manifest_copied_beside_other_weights_is_refused_and_never_reports_its_scores(tmp_path, tiny_model):
    model = _exported(tmp_path, tiny_model)
    assert _eval(tmp_path, model).exit_code == 0
    first = _evals(tmp_path)
    assert {r["model"] for r in first} == {"model-a"}
    # Other weights of the same architecture and vocabulary, with model-a's metadata copied beside them.
    other = build_tiny_sentence_model(tmp_path / "other", [*SENTENCES, "a the is are un el la una in on"], seed=1)
    shutil.copyfile(model / "viewmill.json", other / "viewmill.json")
    refused = _eval(tmp_path, other)
    out = " ".join(refused.output.split())
    assert refused.exit_code == 2 and "Traceback" not in out, out
    assert f"error: {other}/" in out and "does not match the sha256 its viewmill.json recorded at export" in out
    assert "this is not the model model-a" in out and f"remove {other / 'viewmill.json'} to evaluate" in out
    assert "| model |" not in out, "no table: model-a's stored scores are not reported for these weights"
    assert _evals(tmp_path) == first
    # The fix the message gives: without the manifest the folder is a plain model, scored under its own hash.
    (other / "viewmill.json").unlink()
    plain = _eval(tmp_path, other)
    assert plain.exit_code == 0, plain.output
    rows = _evals(tmp_path)
    assert {r["model"] for r in rows} == {"model-a", encoder_fingerprint(str(other))}
    assert [r for r in rows if r["model"] == "model-a"] == first
    theirs = {(r["task"], r["subset"]): r["value"] for r in rows if r["model"] != "model-a"}
    assert theirs != {(r["task"], r["subset"]): r["value"] for r in first}, "scored, not copied from model-a"


def test_weights_changed_in_place_are_refused_and_the_stored_scores_kept(tmp_path, tiny_model):
    from safetensors.torch import load_file, save_file

    model = _exported(tmp_path, tiny_model)
    assert _eval(tmp_path, model).exit_code == 0
    first = _evals(tmp_path)
    exported = (model / "model.safetensors").read_bytes()
    weights = load_file(model / "model.safetensors")
    save_file({k: v + 0.01 for k, v in weights.items()}, model / "model.safetensors")  # fine-tuned further, say
    refused = _eval(tmp_path, model)
    assert refused.exit_code == 2 and _refusal(model, "model.safetensors") in " ".join(refused.output.split())
    assert _evals(tmp_path) == first, "nothing stored, nothing replaced"
    (model / "model.safetensors").write_bytes(exported)  # the exported weights back: model-a, scores reused
    again = _eval(tmp_path, model)
    assert again.exit_code == 0 and _evals(tmp_path) == first


def test_a_manifest_without_file_hashes_is_not_trusted_and_says_so(tmp_path, tiny_model, caplog):
    model = _exported(tmp_path, tiny_model)
    assert _eval(tmp_path, model).exit_code == 0
    first = _evals(tmp_path)
    manifest = json.loads((model / "viewmill.json").read_text())
    del manifest["files_sha256"]  # as viewmill wrote it before issue 21
    (model / "viewmill.json").write_text(json.dumps(manifest))
    with caplog.at_level(logging.WARNING):
        result = _eval(tmp_path, model)
    assert result.exit_code == 0, result.output
    warning = (
        f"{model / 'viewmill.json'} was written before viewmill recorded its model's file hashes, so it cannot "
        f"vouch for the weights beside it: {model} is evaluated as a plain model under its directory hash, not as "
        "the model model-a (export the model again to evaluate it under its own id)"
    )
    assert warning in caplog.messages
    rows = _evals(tmp_path)
    plain = encoder_fingerprint(str(model))
    assert {r["model"] for r in rows} == {"model-a", plain} and [r for r in rows if r["model"] == "model-a"] == first
    assert {r["run_id"] for r in rows if r["model"] == plain}.isdisjoint({r["run_id"] for r in first})


def test_a_module_weights_file_is_checked_too(tmp_path, tiny_model):
    """A weights file the export did not write (a module added beside the model) breaks the identity."""
    model = _exported(tmp_path, tiny_model)
    shutil.copyfile(model / "model.safetensors", model / "1_Pooling" / "model.safetensors")
    refused = _eval(tmp_path, model)
    expected = (
        f"error: {model / '1_Pooling' / 'model.safetensors'} is a weights file that viewmill.json did not record "
        "at export: this is not the model model-a"
    )
    assert refused.exit_code == 2 and expected in " ".join(refused.output.split())
