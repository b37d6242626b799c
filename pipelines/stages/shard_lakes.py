"""Lakes kept open across the shards one process runs, within a `keeping_lakes()` block.

Opening a lake attaches its catalog (about 0.3 s here): at 5,000 sentences a shard, a run of 1M
sentences opened it 400 times. Inside the block a shard's lake is given back open and lent to the
process's next shard; at its end every kept lake is closed, so the flow's own connection to a
single-file (DuckDB) catalog never meets one of them. Two shards at once (a task runner's
threads) get two lakes. A lake whose shard failed is closed, not kept: its state is unknown."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from viewmill.storage.lake import Lake, open_lake

from viewmill.settings import Settings

_lock = threading.Lock()
_idle: dict[tuple[str, str, str], list[Lake]] | None = None  # None: each shard opens and closes its own


@contextmanager
def keeping_lakes() -> Iterator[None]:
    """Keep the shards' lakes open for the next shard until the block ends (nested: the outer one's)."""
    global _idle
    with _lock:
        outer = _idle is not None
        if not outer:
            _idle = {}
    try:
        yield
    finally:
        if not outer:
            with _lock:
                kept, _idle = _idle or {}, None
            for lakes in kept.values():
                for lake in lakes:
                    lake.close()


@contextmanager
def shard_lake(settings: Settings, root: Path | str) -> Iterator[Lake]:
    """A writable lake at `root` for one shard: a kept one if idle, else opened now."""
    key = (str(root), str(settings.catalog_spec()), str(settings.data_path))
    with _lock:
        kept = _idle.get(key) if _idle is not None else None
        lake = kept.pop() if kept else None
    lake = lake or open_lake(settings, root)
    ok = False
    try:
        yield lake
        ok = True
    finally:
        with _lock:
            keep = ok and _idle is not None
            if keep:
                _idle.setdefault(key, []).append(lake)
        if not keep:
            lake.close()
