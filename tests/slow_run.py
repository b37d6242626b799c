"""`viewmill` with a slow (or failing) ingest stage, for tests that look at a run from outside
while it runs: `python -m tests.slow_run run RECIPE ...` runs the command line as `viewmill`
does, and the ingest stage first writes the file GATE_ENV names + ".waiting", then waits until
that file exists (or, with FAIL_ENV set, raises RuntimeError with its text)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import viewmill.pipelines.stages.ingest as ingest_module

GATE_ENV = "VIEWMILL_TEST_INGEST_GATE"
FAIL_ENV = "VIEWMILL_TEST_INGEST_FAIL"
real_ingest_stage = ingest_module.ingest_stage


def ingest_stage(ctx):
    gate = Path(os.environ[GATE_ENV])
    Path(f"{gate}.waiting").write_text(str(os.getpid()), encoding="utf-8")
    while not gate.exists():
        time.sleep(0.1)
    if os.environ.get(FAIL_ENV):
        raise RuntimeError(os.environ[FAIL_ENV])
    return real_ingest_stage(ctx)


if __name__ == "__main__":
    # Patched before the run and flow modules import it, so both run this one (a task of its name).
    ingest_module.ingest_stage = ingest_stage
    from viewmill.pipelines.cli.app import app

    sys.argv[0] = "viewmill"
    app()
