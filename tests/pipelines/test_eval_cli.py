"""`viewmill eval`: several models and their baselines on a suite, side by side."""

from pathlib import Path

from typer.testing import CliRunner
from viewmill.pipelines.cli import app
from viewmill.pipelines.recipe import load_recipe
from viewmill.pipelines.run import RunContext, run_recipe
from viewmill.pipelines.state import StatePaths
from viewmill.storage.lake import Lake

from tests.conftest import SENTENCES, needs_apertium, write_sts_fixture

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
    assert joined == [{"model_id": summary["train"]["model_id"], "path": str(model)}]
