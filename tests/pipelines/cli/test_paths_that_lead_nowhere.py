"""Every path a user names (recipe, --state-dir, model folders, encoders beside a recipe) that is a
symbolic link leading nowhere is refused with exit 2 and one message, whether it is written
relative or absolute and loops through one link, several, or a folder on the way (issue 30,
item 6); Python's `RuntimeError: Symlink loop` never reaches the user."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner
from viewmill.pipelines.cli.app import app

runner = CliRunner()
KINDS = ["one link", "two links", "a folder on the way", "a dangling link"]


def _nowhere(folder: Path, kind: str, name: str) -> str:
    """A path under `folder` (relative to it) that leads nowhere, ending in `name`."""
    if kind == "one link":
        (folder / name).symlink_to(name)
        return name
    if kind == "two links":
        (folder / name).symlink_to(f"other-{name}")
        (folder / f"other-{name}").symlink_to(name)
        return name
    if kind == "a folder on the way":
        (folder / "d1").symlink_to("d2")
        (folder / "d2").symlink_to("d1")
        return f"d1/{name}"
    (folder / name).symlink_to(folder / f"moved-away-{name}")
    return name


def _invoke(args: list[str]) -> tuple[int, str]:
    result = runner.invoke(app, args)
    assert "Traceback" not in result.output and "RuntimeError" not in result.output, result.output
    return result.exit_code, " ".join(result.output.split())


def _given(folder: Path, name: str, written: str, monkeypatch) -> str:
    if written == "relative":
        monkeypatch.chdir(folder)
        return name
    return str(folder / name)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("written", ["relative", "absolute"])
def test_a_recipe_path_that_leads_nowhere(tmp_path, monkeypatch, kind, written):
    given = _given(tmp_path, _nowhere(tmp_path, kind, "r.yaml"), written, monkeypatch)
    code, out = _invoke(["run", given, "--no-prefect", "--state-dir", str(tmp_path / "state")])
    assert code == 2
    assert (
        f"error: recipe {given} is a symbolic link that leads nowhere (a loop, or its target is gone): name the "
        "recipe file itself"
    ) in out
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("written", ["relative", "absolute"])
def test_a_state_directory_that_leads_nowhere(tmp_path, monkeypatch, kind, written):
    given = _given(tmp_path, _nowhere(tmp_path, kind, "state"), written, monkeypatch)
    code, out = _invoke(["lake", "snapshots", "--state-dir", given])
    assert code == 2
    assert (
        f"error: state directory {given} is a symbolic link that leads nowhere (a loop, or its target is gone): "
        "point --state-dir (or VIEWMILL_HOME) at a folder"
    ) in out


@pytest.mark.parametrize("kind", KINDS)
def test_an_encoder_beside_the_recipe_that_leads_nowhere(tmp_path, kind):
    name = _nowhere(tmp_path, kind, "model")
    (tmp_path / "c.txt").write_text("A man plays a guitar.\n", encoding="utf-8")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "name: r\ncorpus: {files: [c.txt]}\naugmenters: [{name: a, method: identity}, {name: b, method: synonym}]\n"
        f"pair: {{view_a: a, view_b: b}}\ntrain: {{encoder: {name}}}\n",
        encoding="utf-8",
    )
    code, out = _invoke(["run", str(recipe), "--no-prefect", "--state-dir", str(tmp_path / "state")])
    assert code == 2
    assert (
        f"error: train.encoder {tmp_path / name} is a symbolic link that leads nowhere (a loop, or its target is "
        "gone): point train.encoder at the model folder itself"
    ) in out


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("written", ["relative", "absolute"])
def test_a_model_folder_to_evaluate_that_leads_nowhere(tmp_path, monkeypatch, kind, written):
    given = _given(tmp_path, _nowhere(tmp_path, kind, "model"), written, monkeypatch)
    code, out = _invoke(["eval", given, "--suite", "papers", "--state-dir", str(tmp_path / "state")])
    assert code == 2
    assert (
        f"error: model folder {given} is a symbolic link that leads nowhere (a loop, or its target is gone): "
        "point at the model folder itself"
    ) in out
