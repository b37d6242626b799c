"""`viewmill eval` away from the repository (issue 33, item 5): the standard suites ship in the
package and are named (`--suite papers`, `--suite multilingual`), a suite file is found from
the working directory with a hint that is right, and the models are checked before the suite."""

from __future__ import annotations

import importlib.resources

import pytest
from typer.testing import CliRunner
from viewmill.pipelines.cli.app import app
from viewmill.pipelines.recipe import load_suite
from viewmill.storage.datasets import fetching

from tests.conftest import write_sts_fixture

runner = CliRunner()


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    """A working directory outside the repository, and a data directory with nothing fetched."""
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setenv(fetching.DATA_ENV, str(tmp_path / "data"))
    monkeypatch.setattr(fetching, "shared_data_dir", lambda: tmp_path / "no-shared-data")
    return cwd


def _eval(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["eval", *args])
    assert "Traceback" not in result.output
    return result.exit_code, " ".join(result.stderr.split()), result.stdout


def test_the_standard_suites_are_package_data_named_from_any_directory(elsewhere):
    shipped = importlib.resources.files("viewmill.train.evaluation") / "suites"
    assert sorted(p.name for p in shipped.iterdir()) == ["multilingual.yaml", "papers.yaml"]
    papers, multilingual = load_suite("papers"), load_suite("multilingual")
    assert len(papers.tasks) == 21 and [t.name for t in papers.tasks][5:7] == ["STS-B", "SICK-R"]
    assert [t.name for t in multilingual.tasks] == [
        "stsb-test", "sickr-test", "stsb-pt-test", "stsb-es-test", "stsb-en-pt-test", "stsb-en-es-test",
        "stsb-fr-test", "stsb-it-test", "stsb-en-fr-test", "stsb-en-it-test",
    ]  # fmt: skip
    fr_it = [(t.lang_a, t.lang_b, t.split) for t in multilingual.tasks[-4:]]
    assert fr_it == [("fr", "fr", "test"), ("it", "it", "test"), ("en", "fr", "test"), ("en", "it", "test")]
    data = elsewhere.parent / "data"
    assert all(data in t.path.parents for t in papers.tasks + multilingual.tasks), "every file a fetched data set"


def test_a_model_that_is_not_there_is_named_before_the_suite(elsewhere):
    code, err, out = _eval("./missing-model", "--suite", "no-such-suite.yaml", "--state-dir", "state")
    assert code == 2 and out == ""
    assert err == "error: encoder directory not found: missing-model"
    assert not (elsewhere / "state").exists()


def test_a_suite_that_is_not_there_is_named_with_a_hint_that_holds(elsewhere, tiny_model):
    code, err, _ = _eval(str(tiny_model), "--suite", "recipes/eval-papers.yaml", "--state-dir", "state")
    assert code == 2
    assert err == (
        f"error: evaluation suite not found: recipes/eval-papers.yaml (from the working directory {elsewhere}): "
        "name a standard suite (multilingual, papers) or a suite file"
    )
    code, err, _ = _eval(str(tiny_model), "--suite", "paper", "--state-dir", "state")
    assert code == 2
    assert err == (
        f"error: evaluation suite not found: paper (from the working directory {elsewhere}) (did you mean "
        "'papers'?): name a standard suite (multilingual, papers) or a suite file"
    )


def test_the_default_suite_is_found_from_another_directory_and_names_the_data_to_fetch(elsewhere, tiny_model):
    code, err, _ = _eval(str(tiny_model), "--state-dir", "state")
    assert code == 2
    assert err.startswith("error: STS folder not found: ") and err.endswith("fetch it with: viewmill data fetch sts12")


def test_a_suite_file_is_taken_from_the_working_directory_its_tasks_from_its_folder(elsewhere, tiny_model):
    folder = elsewhere / "suites"
    folder.mkdir()
    write_sts_fixture(folder / "sts.csv")
    (folder / "mine.yaml").write_text("tasks: [{name: fixture, format: stsb, path: sts.csv}]\n", encoding="utf-8")
    code, err, out = _eval(str(tiny_model), "--suite", "suites/mine.yaml", "--no-baselines", "--state-dir", "state")
    assert code == 0, err
    assert "| model | fixture | Avg. |" in out
    assert len(list((elsewhere / "state" / "reports").glob("eval-*.md"))) == 1
