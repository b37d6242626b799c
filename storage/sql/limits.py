"""A query's time and memory limits (`viewmill sql --timeout --memory`) and the error a limit hit
raises. Apart from the sandbox so that the CLI reads their defaults without loading DuckDB or pyarrow."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from viewmill.storage.catalog import LakeError

_SIZE = re.compile(r"\d+(\.\d+)?\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)", re.IGNORECASE)
_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "kib": 1 << 10, "mib": 1 << 20,
          "gib": 1 << 30, "tib": 1 << 40}  # fmt: skip


class QueryLimitHit(LakeError):
    """The query ran past its time or memory limit; the message names the flag that raises it."""


@dataclass(frozen=True)
class QueryLimits:
    """How long (seconds) and how much memory (a DuckDB size: 2GB, 512MB) one query may take."""

    timeout_s: float = 60.0
    memory: str = "2GB"

    def __post_init__(self) -> None:
        if not (math.isfinite(self.timeout_s) and self.timeout_s > 0):
            raise ValueError(f"--timeout {self.timeout_s} is not a time limit: give seconds above 0, e.g. --timeout 60")
        if not _SIZE.fullmatch(self.memory.strip()):
            raise ValueError(f"--memory {self.memory!r} is not a size: write it like 2GB, 512MB or 1.5GiB")

    @property
    def memory_bytes(self) -> int:
        """The memory limit in bytes, as DuckDB reads it (KB = 1000 bytes, KiB = 1024)."""
        number, unit = _SIZE.fullmatch(self.memory.strip()).group(0, 2)
        return int(float(number[: -len(unit)]) * _UNITS[unit.lower()])

    @property
    def batch_rows(self) -> int:
        """Rows per Arrow batch: a batch of rows of 256 bytes takes a sixteenth of the memory limit,
        so the result in Python (a batch, its conversion, its text) stays within the limit too."""
        rows = self.memory_bytes // (16 * 256)
        return min(max(rows - rows % 2048, 2048), 122_880)  # whole DuckDB vectors; DuckDB's row group at most

    def time_hit(self) -> QueryLimitHit:
        return QueryLimitHit(
            f"the query ran past its {self.timeout_s:g} s limit: narrow it (a WHERE, a LIMIT, fewer joins), "
            "or raise --timeout"
        )

    def memory_hit(self, detail: str = "") -> QueryLimitHit:
        detail = f"; {detail}" if detail else ""
        return QueryLimitHit(
            f"the query needed more than its {self.memory} memory limit (nothing spills to disk{detail}): narrow "
            "it (a WHERE, a LIMIT, fewer columns), or raise --memory"
        )
