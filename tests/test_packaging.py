"""The distribution installs everything under one `viewmill` namespace.

A built wheel is unpacked and imported from a directory whose own `train.py`,
`pipelines.py`, `storage.py` and `augment.py` would shadow generic top-level names.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO

LAYERS = ("augment", "pipelines", "storage", "train")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # a copy, so setuptools' build/ folder neither lands in the checkout nor feeds stale files in
    source = tmp_path_factory.mktemp("source") / "viewmill"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(".venv", ".git", "build", ".viewmill*", "*.egg-info"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(source)],
        check=True, capture_output=True,
    )  # fmt: skip
    (found,) = out.glob("viewmill-*.whl")
    return found


def test_wheel_holds_only_the_viewmill_namespace(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {name.split("/")[0] for name in names if not name.startswith("viewmill-")}
    assert top_level == {"viewmill"}
    for layer in LAYERS:
        assert f"viewmill/{layer}/__init__.py" in names
    assert "viewmill/augment/wordnet_lexnames.txt" in names
    assert "viewmill/train/citations.bib" in names  # the objectives' model-card citations
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "viewmill = viewmill.pipelines.cli.entry:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_imports_work_beside_files_named_like_the_layers(wheel, tmp_path):
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    project = tmp_path / "users-project"
    project.mkdir()
    for layer in LAYERS:
        (project / f"{layer}.py").write_text("raise SystemExit('the user file was imported')\n")
    code = (
        # the test venv's editable install of this checkout is hidden: only the wheel counts
        "import sys; from pathlib import Path; "
        "sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in getattr(f, '__module__', '')]; "
        f"sys.path[:] = [p for p in sys.path if p and Path(p).resolve() != Path({str(REPO)!r})]; "
        f"sys.path.insert(1, {str(site)!r}); "
        "import viewmill, viewmill.train.objectives, viewmill.storage.lake, viewmill.augment.engines; "
        "print(viewmill.__version__, viewmill.train.objectives.__file__)"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=project, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    version, path = result.stdout.split()
    assert path.startswith(str(site)), path
    import viewmill

    assert version == viewmill.__version__
