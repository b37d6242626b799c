"""STS formats are a registry (`STS_FORMATS`): a plugin's format, one module declared in the
entry-point group `viewmill.sts_formats`, is validated, loaded and scored as viewmill's own
are, its settings checked, its data set named on model cards and listed by `viewmill plugins`."""

import numpy as np
import pytest
from pydantic import ValidationError
from viewmill.train.card import task_dataset
from viewmill.train.evaluation.sts import STS_FORMATS, StsTask, score_task

from tests.plugins import forget_plugin, install_plugin
from viewmill.registry import RegistryError

PLUGIN = '''
import csv

import numpy as np
from viewmill.train.evaluation.sts import StsData, StsFormat


def load_pipe_sts(task):
    """A CSV with a header: s1, s2, score; `split` picks the rows of one split column value."""
    with open(task.path, encoding="utf-8", newline="") as handle:
        rows = [row for row in csv.DictReader(handle) if row["split"] == (task.split or "test")]
    data = StsData([r["s1"] for r in rows], [r["s2"] for r in rows], np.asarray([float(r["score"]) for r in rows]),
                   f"{len(rows)} pairs of {task.path.name}")
    return {"all": data}


def pipe_sts_dataset(get):
    return {"id": "someone/pipe-sts", "config": None, "split": get("split") or "test"}


PIPE_STS = StsFormat(load_pipe_sts, settings=("split",), dataset=pipe_sts_dataset)
NOT_A_FORMAT = load_pipe_sts
'''

ENTRY_POINTS = """
[viewmill.sts_formats]
pipe-sts = viewmill_sts_plugin:PIPE_STS
broken = viewmill_sts_plugin:NOT_A_FORMAT
"""
# Words as 2-d vectors: a pair's cosine falls as its gold score does.
VECTORS = {"cat": [1.0, 0.0], "kitten": [0.9, 0.1], "dog": [0.6, 0.8], "car": [0.0, 1.0], "x": [1.0, 1.0]}
CSV = "s1,s2,score,split\ncat,kitten,4.5,test\ncat,dog,2.0,test\ncat,car,0.5,test\nx,x,5,dev\n"


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    install_plugin(tmp_path / "site", monkeypatch, "viewmill_sts_plugin", PLUGIN, ENTRY_POINTS)
    (tmp_path / "pairs.csv").write_text(CSV, encoding="utf-8")
    yield tmp_path
    forget_plugin("viewmill_sts_plugin")


def _embed(texts: list[str]) -> np.ndarray:
    return np.array([VECTORS[text] for text in texts])


def test_a_plugin_format_is_loaded_through_the_registry_and_scored(plugin):
    task = StsTask(name="pipes", format="pipe-sts", path=plugin / "pairs.csv")
    [row] = score_task(_embed, task)
    assert row == {"subset": "all", "value": pytest.approx(100.0), "n": 3, "convention": "3 pairs of pairs.csv",
                   "unscored": 0}  # fmt: skip
    dev = task.model_copy(update={"split": "dev"})
    assert score_task(_embed, dev)[0]["n"] == 1, "the format reads the setting it declares"


def test_a_plugin_format_names_its_data_set_on_model_cards(plugin):
    task = StsTask(name="pipes", format="pipe-sts", path=plugin / "pairs.csv", split="dev")
    expected = {"id": "someone/pipe-sts", "config": None, "split": "dev"}
    assert task_dataset(task) == expected and task_dataset(task.model_dump(mode="json")) == expected
    assert task_dataset({"format": "pipe-sts-uninstalled", "path": "x"}) is None
    assert task_dataset({"format": "stsb", "path": "data/stsbenchmark/sts-dev.csv"}) == {
        "id": "mteb/stsbenchmark-sts", "config": None, "split": "validation"
    }  # fmt: skip


def test_settings_a_format_does_not_read_are_refused_naming_the_formats_that_do(plugin):
    """The broken plugin is left out of the message, not raised in the place of the task's mistake."""
    with pytest.raises(ValidationError, match="split, lang_a and lang_b apply to formats stsb-xling, pipe-sts only"):
        StsTask(name="t", format="stsb", path=plugin / "pairs.csv", split="dev")
    with pytest.raises(ValidationError, match="track and gold_alignment apply to format sts17 only"):
        StsTask(name="t", format="pipe-sts", path=plugin / "pairs.csv", track="en-en")


def test_unknown_and_broken_formats_are_refused_with_the_fix(plugin):
    with pytest.raises(ValidationError, match=r"unknown STS format 'pipe-st' \(did you mean 'pipe-sts'\?\)"):
        StsTask(name="t", format="pipe-st", path=plugin / "pairs.csv")
    with pytest.raises(RegistryError, match="STS format entry must be a viewmill.train.evaluation.sts.StsFormat"):
        STS_FORMATS["broken"]


def test_the_cli_lists_sts_formats(plugin):
    from typer.testing import CliRunner
    from viewmill.pipelines.cli.app import app

    result = CliRunner().invoke(app, ["plugins"])
    assert result.exit_code == 0, result.output
    formats = "stsb, sick, sick-all, senteval-sts, sts17, stsb-xling, broken, pipe-sts"
    assert f"STS formats [viewmill.sts_formats]: {formats}" in result.output.splitlines()


def test_a_task_of_one_named_subset_also_has_its_headline_row(monkeypatch):
    # A senteval-sts folder holding one STS.input.X.txt is one subset named X: the evaluate stage
    # reads each task's "all" row, which was missing.
    from viewmill.train.evaluation import sts

    data = sts.StsData(["a b", "c d", "e f"], ["a c", "c e", "f a"], np.array([1.0, 3.0, 5.0]), "Spearman x100")
    monkeypatch.setattr(sts, "load_task", lambda task: {"headlines": data})
    rng = np.random.default_rng(0)
    vectors = {text: rng.normal(size=4) for text in {*data.s1, *data.s2}}
    rows = score_task(lambda texts: np.stack([vectors[t] for t in texts]), StsTask(name="x", format="stsb", path="x"))
    assert [r["subset"] for r in rows] == ["headlines", "all"]
    assert rows[1]["value"] == rows[0]["value"] and rows[1]["n"] == 3
