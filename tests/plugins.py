"""A plugin distribution installed the way pip leaves one, for tests of the registries: the
plugin's module and its dist-info (METADATA, entry_points.txt) in a folder put first on sys.path
(by `monkeypatch`, so it is gone after the test)."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest


def install_plugin(site: Path, monkeypatch: pytest.MonkeyPatch, name: str, source: str, entry_points: str) -> None:
    """Module `name` (its text `source`) registering `entry_points` (an entry_points.txt)."""
    site.mkdir(parents=True, exist_ok=True)
    (site / f"{name}.py").write_text(source, encoding="utf-8")
    info = site / f"{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points), encoding="utf-8")
    monkeypatch.syspath_prepend(str(site))


def forget_plugin(name: str) -> None:
    """Drop the plugin's imported module, so the next test's install imports its own."""
    sys.modules.pop(name, None)
