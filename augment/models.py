"""Model weights: loaded on first use, once per process, and logged.

Producers are built once per process and run (preflight builds its own, without the lake:
pipelines/stages/producers.py) and only read configuration when built; weights come from
here when a batch really needs them, and every shard in the process shares them.
`release_models()` frees them at a run's end.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
logger = logging.getLogger("viewmill.models")

_loaded: dict[tuple[str, ...], Any] = {}
_lock = threading.Lock()


def load_once(kind: str, ref: str, device: str, variant: str, load: Callable[[], T]) -> T:
    """The weights of `ref` for (kind, device, variant), loading them with `load` the first time."""
    key = (kind, ref, device, variant)
    with _lock:
        if key not in _loaded:
            logger.info("loading model %s on device %s (%s, %s)", ref, device, kind, variant)
            _loaded[key] = load()
        return _loaded[key]


def release_models() -> int:
    """Drop every loaded model (the run is over); returns how many there were."""
    with _lock:
        count = len(_loaded)
        _loaded.clear()
    return count
