"""The crash-injection hook of the kill tests, for every layer: a process whose environment
names a point (`VIEWMILL_TEST_CRASH_AT=export-partial`) kills itself there with SIGKILL, as a
power cut or the OOM killer would, so a test can check what survives and what a rerun mends."""

from __future__ import annotations

import os
import signal

CRASH_ENV = "VIEWMILL_TEST_CRASH_AT"


def crash_point(name: str) -> None:
    """Kill this process here when the test hook names this point; nothing otherwise."""
    if os.environ.get(CRASH_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
