"""`--set` into lists (issue 33.6): a list of named entries is addressed by an entry's name; an index,
an unknown name or a list without names is refused, naming the entries and the way that works."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner
from viewmill.pipelines.cli.app import app
from viewmill.pipelines.recipe import RecipeError, load_recipe, recipe_from_mapping
from viewmill.pipelines.safe_yaml import load_yaml

from tests.conftest import REPO

DEMO = REPO / "recipes" / "demo.yaml"


def test_a_list_entry_is_set_by_its_name():
    recipe = load_recipe(DEMO, ["augmenters.bt_ca.path=[en, es, en]", "train.dev.sick-trial.weight=3",
                                "evaluate.tasks.stsb-test.name=stsb-test-2"])  # fmt: skip
    assert [a.path for a in recipe.augmenters[2:]] == [["en", "es", "en"], ["en", "es", "en"]]
    assert [t.weight for t in recipe.train.dev_tasks] == [1.0, 3.0]
    assert [t.name for t in recipe.evaluate.tasks] == ["stsb-dev", "sick-trial", "stsb-test-2", "sickr-test"]
    whole = load_recipe(DEMO, ["augmenters.bt_ca={name: bt_ca, method: backtranslation, engine: apertium, "
                               "path: [en, es, en]}"])  # fmt: skip
    assert whole.augmenters[3].path == ["en", "es", "en"]
    assert load_recipe(DEMO).augmenters[3].path == ["en", "ca", "en"], "the file is left as it is"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("augmenters.0.engine=hf", "override 'augmenters.0.engine=hf': lists are addressed by their entries' name, "
         "not by index; augmenters has en, entail, bt_es, bt_ca (e.g. --set augmenters.en.engine=hf)"),
        ("augmenters.bt-es.engine=hf", "override 'augmenters.bt-es.engine=hf': no entry is named 'bt-es' (did you "
         "mean 'bt_es'?); augmenters has en, entail, bt_es, bt_ca (e.g. --set augmenters.en.engine=hf)"),
        ("pair.pairings.0=[bt_es, bt_ca]", "override 'pair.pairings.0=[bt_es, bt_ca]': pair.pairings is a list whose "
         "entries have no names, so it cannot be set in part: set it whole (pair.pairings=[...])"),
    ],
)  # fmt: skip
def test_an_index_or_unknown_name_is_refused_naming_the_entries(override, message):
    with pytest.raises(RecipeError) as refused:
        recipe_from_mapping(load_yaml(DEMO.read_text(encoding="utf-8")), DEMO, [override])
    assert str(refused.value) == message


def test_the_cli_refuses_an_index_with_exit_2():
    result = CliRunner().invoke(app, ["run", str(DEMO), "--no-prefect", "--set", "augmenters.0.engine=hf"])
    assert result.exit_code == 2
    assert "lists are addressed by their entries' name, not by index" in " ".join(result.stderr.split())
