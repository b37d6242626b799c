"""The meaning filter's embeddings, kept in the process so each distinct text is embedded once
whichever augmenter asks for it: every augmenter's check embeds the sentence's source, and the
near-duplicate check embeds the earlier augmenters' kept views, which their own checks embedded
already (issue 32: about 6 texts embedded per sentence for 3 distinct with three augmenters).

Keyed by the exact text, as the encoder sees it (not `meaning.normalised`: "Hello, World!" and
"hello world" embed differently). The augment stage keeps one cache per loaded encoder
(`augment.models.load_once`), so one encoder's rows never answer for another's and
`release_models()` frees them at a run's end. Only an optimisation: a hit returns the row the
encoder returned for that text, so verdicts, resume and kill are unchanged.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

import numpy as np

Embed = Callable[[list[str]], np.ndarray]  # texts -> one embedding per row
# Least recently used rows go first past this: 73 MiB of float32 rows at MiniLM's 384 dimensions.
# A 5,000-sentence shard (the default) with three augmenters uses about 15,000.
MAX_TEXTS = 50_000


class EmbeddingCache:
    """`embed` with memory: called with texts, returns one row per text, embedding in one call
    only the distinct texts it does not hold; holds at most `max_texts` rows (LRU)."""

    def __init__(self, embed: Embed, max_texts: int = MAX_TEXTS) -> None:
        if max_texts < 0:
            raise ValueError(f"max_texts is {max_texts}: give 0 or more rows to keep")
        self._embed = embed
        self._max_texts = max_texts
        self._rows: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()  # shard tasks may share a process's encoder from threads

    def __len__(self) -> int:
        return len(self._rows)

    def __call__(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return self._embed(texts)
        with self._lock:
            todo = list(dict.fromkeys(t for t in texts if t not in self._rows))
            fresh = self._embedded(todo) if todo else {}
            matrix = np.stack([fresh[t] if t in fresh else self._rows[t] for t in texts])
            for text in dict.fromkeys(texts):
                if text in self._rows:
                    self._rows.move_to_end(text)
            self._rows.update(fresh)
            while len(self._rows) > self._max_texts:
                self._rows.popitem(last=False)
            return matrix

    def _embedded(self, texts: list[str]) -> dict[str, np.ndarray]:
        matrix = np.asarray(self._embed(texts))
        if matrix.ndim != 2 or matrix.shape[0] != len(texts):
            raise ValueError(
                f"the meaning encoder returned shape {matrix.shape} for {len(texts)} texts: one row per text"
            )
        return {text: row.copy() for text, row in zip(texts, matrix, strict=True)}  # a copy frees the batch
