"""An augment run SIGKILLed part-way, for the kill-and-resume tests of each engine.

Run as a module (`python -m tests.augment.killed_augment LAKE ENGINE SRC PIVOT`) it is the
child: a round trip SRC>PIVOT>SRC named `bt` over corpus `c`, in chunks of 4, each batch slowed
down so the parent can kill it between chunks; it prints the sentences done after each chunk.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def kill_mid_augment(lake_dir: Path, engine: str, src: str, pivot: str) -> None:
    """Run the child on `lake_dir` and SIGKILL it once two chunks are committed."""
    from tests.conftest import REPO  # not in the child: conftest sets up test-wide state

    child = subprocess.Popen(
        [sys.executable, "-m", "tests.augment.killed_augment", str(lake_dir), engine, src, pivot],
        cwd=REPO, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert child.stdout is not None
    for line in child.stdout:
        if line.strip().isdigit() and int(line) >= 8:  # two chunks committed, more to come
            child.send_signal(signal.SIGKILL)
            break
    child.wait()
    assert child.returncode == -signal.SIGKILL


def _slowed(make_engine):
    def make_slow_engine(*args):
        engine = make_engine(*args)
        translate = engine.translate

        def slow_translate(texts, src, tgt, decoding):
            time.sleep(0.3)  # slow enough for the parent to kill between chunks
            return translate(texts, src, tgt, decoding)

        engine.translate = slow_translate
        return engine

    return make_slow_engine


def _main(lake_dir: str, engine: str, src: str, pivot: str) -> None:
    import viewmill.augment.translation_augmenters as translation_augmenters
    from viewmill.augment.augmenters import BackTranslation
    from viewmill.augment.quality import FilterSpec
    from viewmill.storage.lake import Lake

    from tests.views import make_views

    translation_augmenters.make_engine = _slowed(translation_augmenters.make_engine)
    spec = BackTranslation(name="bt", engine=engine, path=[src, pivot, src])
    with Lake(lake_dir) as lake:
        make_views(lake, "c", spec, FilterSpec(), run_id="killed", chunk_size=4,
                   on_progress=lambda done, total: print(done, flush=True))  # fmt: skip
    print("finished", flush=True)


if __name__ == "__main__":
    _main(*sys.argv[1:])
