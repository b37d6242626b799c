"""Deployments for one box (`viewmill serve`), and what the CLI says when the server is gone."""

import socket

from typer.testing import CliRunner
from viewmill.pipelines.cli.app import app

runner = CliRunner()


def test_nightly_augmentation_and_training_on_new_pairs(tmp_path, tiny_recipe):
    from viewmill.pipelines.orchestration.deploy import recipe_deployments

    nightly, training = recipe_deployments(str(tiny_recipe), str(tmp_path / "state"), cron="30 1 * * *")
    assert nightly.name == "tiny-served-nightly-augment" and nightly.flow_name == "viewmill-augment"
    assert [s.schedule.cron for s in nightly.schedules] == ["30 1 * * *"]
    assert training.flow_name == "viewmill-train" and not training.schedules
    (trigger,) = training.triggers
    assert trigger.expect == {"viewmill.snapshot.created"}
    assert trigger.parameters["snapshot"] == "{{ event.payload.snapshot }}"
    assert trigger.parameters["recipe_path"] == str(tiny_recipe.resolve())
    assert "gpu" in training.tags, "one GPU never runs two model tasks: the gpu tag carries the concurrency limit"


def test_worker_deployments_import_the_installed_flows_under_their_own_names(tmp_path, tiny_recipe):
    from viewmill.pipelines.orchestration.deploy import Workers, recipe_deployments

    workers = Workers("cpu-pool", "gpu-pool", workdir=str(tmp_path / "work"))
    nightly, training = recipe_deployments(tiny_recipe, tmp_path / "state", workers=workers)
    served = recipe_deployments(tiny_recipe, tmp_path / "state")
    assert {nightly.name, training.name} == {"tiny-nightly-augment", "tiny-train"}
    assert not {nightly.name, training.name} & {d.name for d in served}, "serve stopping would pause deploy's"
    # A module path: no pull step, no folder the worker must have; any install of viewmill runs it.
    assert nightly.entrypoint == "viewmill.pipelines.orchestration.flows.augment_flow" and nightly.storage is None
    assert training.entrypoint == "viewmill.pipelines.orchestration.flows.train_flow"
    assert (nightly.work_pool_name, training.work_pool_name) == ("cpu-pool", "gpu-pool")
    assert nightly.job_variables == {"working_dir": str(tmp_path / "work")}
    assert nightly.paused is False, "a redeploy resumes a deployment that was paused"
    assert nightly.parameters == {"recipe_path": str(tiny_recipe.resolve()), "state_dir": str(tmp_path / "state")}
    (trigger,) = training.triggers
    assert trigger.match.model_dump() == {"viewmill.recipe": "tiny"} and trigger.parameters["state_dir"] == str(
        tmp_path / "state"
    )
    without = recipe_deployments(tiny_recipe, tmp_path / "state", workers=Workers())
    assert without[0].job_variables == {} and without[0].work_pool_name == "viewmill-cpu"


def test_deploy_needs_a_recipe_or_a_prefect_file_and_checks_the_recipe_first(tmp_path, monkeypatch):
    import re

    monkeypatch.setenv("PREFECT_API_URL", f"http://127.0.0.1:{_closed_port()}/api")
    neither = runner.invoke(app, ["deploy"])
    flat = re.sub(r"[\s│╭╮╰╯─]+", " ", neither.output)
    assert neither.exit_code == 2 and "name a recipe" in flat and "--prefect-file prefect.yaml" in flat
    missing = runner.invoke(app, ["deploy", str(tmp_path / "nope.yaml")])
    assert missing.exit_code == 2 and "recipe not found" in missing.output
    assert "unreachable" not in missing.output, "bad input is refused before the server is asked"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_server_is_named_with_the_fix(tmp_path, tiny_recipe, monkeypatch):
    monkeypatch.setenv("PREFECT_API_URL", f"http://127.0.0.1:{_closed_port()}/api")
    result = runner.invoke(app, ["run", str(tiny_recipe), "--state-dir", str(tmp_path / "s")])
    assert result.exit_code == 2
    assert "unreachable" in result.output and "--no-prefect" in result.output
    assert not (tmp_path / "s" / "lake").exists(), "nothing written"
    served = runner.invoke(app, ["serve", str(tiny_recipe), "--state-dir", str(tmp_path / "s")])
    assert served.exit_code == 2 and "unreachable" in served.output


def test_serve_without_a_server_says_how_to_start_one(tmp_path, tiny_recipe, monkeypatch):
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    result = runner.invoke(app, ["serve", str(tiny_recipe), "--state-dir", str(tmp_path)])
    assert result.exit_code == 2 and "prefect server start" in result.output


def test_prefect_yaml_points_at_real_flows_and_pools():
    import importlib

    import yaml

    from tests.conftest import REPO

    spec = yaml.safe_load((REPO / "prefect.yaml").read_text(encoding="utf-8"))
    by_name = {d["name"]: d for d in spec["deployments"]}
    for deployment in by_name.values():
        path, function = deployment["entrypoint"].split(":")
        module = importlib.import_module("viewmill." + path.removesuffix(".py").replace("/", "."))
        assert hasattr(getattr(module, function), "to_deployment"), deployment["entrypoint"]
        assert (REPO / deployment["parameters"]["recipe_path"]).is_file()
    assert by_name["demo-nightly-augment"]["work_pool"]["name"] == "viewmill-cpu"
    train = by_name["demo-train"]
    assert train["work_pool"]["name"] == "viewmill-gpu"
    assert train["triggers"][0]["expect"] == ["viewmill.snapshot.created"]


def test_deploy_takes_a_catalog_for_its_runs_but_never_a_password(tmp_path, tiny_recipe, monkeypatch):
    """Issue 33.6: `deploy --catalog`, as `run` and `serve` have it: the deployments' environment names the
    catalog (a file catalog's path made absolute for workers elsewhere); a password is refused before any
    server is asked, since the deployment stores its environment on the server."""
    import re

    from viewmill.pipelines.cli.prefect import catalog_env

    monkeypatch.chdir(tmp_path)
    assert catalog_env("sqlite:cat/lake.sqlite", tmp_path) == {"VIEWMILL_CATALOG": f"sqlite:{tmp_path}/cat/lake.sqlite"}
    assert catalog_env("postgres:dbname=lake host=db", tmp_path) == {"VIEWMILL_CATALOG": "postgres:dbname=lake host=db"}
    assert catalog_env(None, tmp_path) == {}

    monkeypatch.setenv("PREFECT_API_URL", f"http://127.0.0.1:{_closed_port()}/api")
    secret = runner.invoke(app, ["deploy", str(tiny_recipe), "--catalog", "postgres:dbname=lake password=hunter2"])
    flat = re.sub(r"[\s│╭╮╰╯─]+", " ", secret.output)
    assert secret.exit_code == 2 and "the catalog holds a password" in flat and "PGPASSWORD" in flat
    assert "hunter2" not in secret.output and "unreachable" not in secret.output
    bad = runner.invoke(app, ["deploy", str(tiny_recipe), "--catalog", "mysql:x"])
    assert bad.exit_code == 2 and "is not understood" in bad.output
    assert "--catalog" in runner.invoke(app, ["deploy", "-h"]).output


def test_deployed_runs_get_the_catalog_in_their_environment(tmp_path, tiny_recipe, monkeypatch):
    from viewmill.pipelines.orchestration import deploy, prefect_env

    registered = []
    monkeypatch.setattr(prefect_env, "connect_prefect", lambda _: "server: test")
    monkeypatch.setattr(deploy, "ensure_gpu_limit", lambda limit: False)
    monkeypatch.setattr(deploy, "register", lambda made: registered.extend(made) or [d.name for d in made])
    monkeypatch.setattr(deploy, "rival_warning", lambda *a, **k: None)
    args = ["deploy", str(tiny_recipe), "--no-create-pools", "--workdir", str(tmp_path / "w"),
            "--catalog", "duckdb:" + str(tmp_path / "c.ducklake")]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert [d.job_variables for d in registered] == [
        {"working_dir": str(tmp_path / "w"), "env": {"VIEWMILL_CATALOG": f"duckdb:{tmp_path / 'c.ducklake'}"}}
    ] * 2
