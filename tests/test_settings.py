"""One typed Settings object: read from VIEWMILL_* once, flags win, the catalog stays secret,
and nothing is handed on through os.environ or chosen at import time."""

import os
import subprocess
import sys

import pytest
from pydantic import SecretStr
from typer.testing import CliRunner
from viewmill.pipelines.cli.app import app
from viewmill.pipelines.state import StatePaths
from viewmill.storage.lake import open_lake

from tests.conftest import REPO
from viewmill.paths import PathError
from viewmill.settings import Settings


def test_settings_come_from_viewmill_variables(monkeypatch, tmp_path):
    monkeypatch.setenv("VIEWMILL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("VIEWMILL_CATALOG", "postgres:dbname=lake password=hunter2")
    monkeypatch.setenv("VIEWMILL_DASK", "local:2")
    monkeypatch.setenv("VIEWMILL_RESULTS", "s3://bucket/results")
    monkeypatch.setenv("VIEWMILL_DATA_PATH", "s3://bucket/lake/")
    settings = Settings()
    assert settings.state_root == (tmp_path / "home").resolve()
    assert settings.catalog_spec() == "postgres:dbname=lake password=hunter2"
    assert (settings.dask, settings.results, settings.data_path) == (
        "local:2",
        "s3://bucket/results",
        "s3://bucket/lake/",
    )
    assert "hunter2" not in repr(settings) and "hunter2" not in settings.model_dump_json()


def test_flags_win_and_absent_flags_keep_the_environment(monkeypatch):
    monkeypatch.setenv("VIEWMILL_CATALOG", "sqlite")
    monkeypatch.delenv("VIEWMILL_DASK", raising=False)
    settings = Settings().with_overrides(catalog="duckdb", dask=None)
    assert isinstance(settings.catalog, SecretStr) and settings.catalog_spec() == "duckdb"
    assert settings.dask is None
    assert Settings().with_overrides(catalog=None).catalog_spec() == "sqlite"


def test_a_lake_opens_under_the_settings_catalog_not_the_environments(monkeypatch, tmp_path):
    monkeypatch.setenv("VIEWMILL_CATALOG", "sqlite")
    with open_lake(Settings(catalog="duckdb"), tmp_path / "lake") as lake:
        assert lake.catalog.kind == "duckdb"
    assert (tmp_path / "lake" / "catalog.ducklake").is_file() and not (tmp_path / "lake" / "catalog.sqlite").exists()


def test_the_cli_hands_nothing_on_through_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("VIEWMILL_CATALOG", raising=False)
    open_lake(Settings(catalog="duckdb"), tmp_path / "lake").close()
    result = CliRunner().invoke(
        app, ["sql", "SELECT count(*) AS n FROM sentences", "--state-dir", str(tmp_path), "--catalog", "duckdb"]
    )
    assert result.exit_code == 0, result.output
    assert "VIEWMILL_CATALOG" not in os.environ


def test_the_task_runner_is_not_chosen_at_import(tmp_path):
    env = {**os.environ, "VIEWMILL_DASK": "local:2", "PREFECT_HOME": str(tmp_path)}
    code = "from viewmill.pipelines.orchestration import flows; print(type(flows.recipe_flow.task_runner).__name__)"
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ThreadPoolTaskRunner"


def test_the_state_folder_comes_from_either_variable_and_a_conflict_is_refused(monkeypatch, tmp_path):
    monkeypatch.delenv("VIEWMILL_HOME", raising=False)
    monkeypatch.setenv("VIEWMILL_STATE_DIR", str(tmp_path / "state"))
    assert StatePaths.resolve().root == (tmp_path / "state").resolve()
    monkeypatch.setenv("VIEWMILL_HOME", str(tmp_path / "state"))
    assert StatePaths.resolve().root == (tmp_path / "state").resolve()
    monkeypatch.setenv("VIEWMILL_HOME", str(tmp_path / "home"))
    with pytest.raises(PathError, match="VIEWMILL_HOME .* and VIEWMILL_STATE_DIR .* name different state folders"):
        StatePaths.resolve()
    assert StatePaths.resolve(tmp_path / "flag").root == (tmp_path / "flag").resolve()  # the flag wins
