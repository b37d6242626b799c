"""Optional extras: pyproject's split, and the message a missing optional package gives."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib

import pytest

from tests.conftest import REPO
from viewmill.extras import EXTRAS, MissingExtraError, require

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\[<>=!~; ]", r, maxsplit=1)[0].lower().replace("_", "-") for r in requirements}


def test_pyproject_has_ranges_only_and_the_extras_split_the_install():
    extras = PYPROJECT["optional-dependencies"]
    optional = {"mt", "prefect", "postgres", "dask", "bergamot", "bench"}
    assert set(extras) == optional | {"test", "all"}
    assert extras["all"] == ["viewmill[mt,prefect,postgres,dask,bergamot,bench]"]
    core = _names(PYPROJECT["dependencies"])
    for extra in optional:
        assert not core & _names(extras[extra]), extra
    assert {"ctranslate2", "prefect", "psycopg", "prefect-dask", "duckdb-extension-postgres-scanner"}.isdisjoint(core)
    # Exact pins live in constraints.txt only.
    for requirement in PYPROJECT["dependencies"] + [r for e in extras.values() for r in e]:
        assert "==" not in requirement, requirement
    # Every module the message maps names an extra that exists.
    assert set(EXTRAS.values()) <= set(extras)


def test_require_names_the_extra_of_a_missing_optional_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # as if not installed
    with pytest.raises(MissingExtraError) as caught:
        require("ctranslate2", "the ctranslate2 engine")
    assert str(caught.value) == (
        "the ctranslate2 engine needs ctranslate2, which is not installed: "
        "pip install 'viewmill[mt]' (or 'viewmill[all]' for every extra)"
    )
    monkeypatch.setitem(sys.modules, "not_an_extra_module", None)
    with pytest.raises(ModuleNotFoundError) as plain:
        require("not_an_extra_module", "nothing")
    assert not isinstance(plain.value, MissingExtraError)


def test_the_cli_reports_a_missing_extra_as_one_line_and_exit_2(tmp_path):
    blocked = "import sys; sys.modules['prefect'] = None; sys.modules['psutil'] = None\n"
    run = "sys.argv = ['viewmill', 'server', 'status', '--state-dir', sys.argv[1]]\n"
    code = blocked + run + "from viewmill.pipelines.cli.app import app\napp()\n"
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "error: psutil is needed here, which is not installed: pip install 'viewmill[prefect]' "
        "(or 'viewmill[all]' for every extra)"
    )
