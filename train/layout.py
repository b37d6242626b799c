"""Where each kind of row sits in a tokenised training batch."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BatchLayout:
    """Rows [a_1..a_n, b_1..b_n, negatives, sources]: `k` hard negatives per pair, row-major
    (pair i's at 2n + i*k ... 2n + i*k + k - 1), then one source sentence per pair when
    `sources`. With k = 0 and no sources it is the plain [a..., b...] batch."""

    n: int
    k: int = 0
    sources: bool = False

    @property
    def a(self) -> slice:
        return slice(0, self.n)

    @property
    def b(self) -> slice:
        return slice(self.n, 2 * self.n)

    @property
    def negatives(self) -> slice:
        return slice(2 * self.n, (2 + self.k) * self.n)

    @property
    def source(self) -> slice:
        """The source sentences' rows; view a's when the batch carries none."""
        start = (2 + self.k) * self.n
        return slice(start, start + self.n) if self.sources else self.a

    @property
    def rows(self) -> int:
        return (2 + self.k + int(self.sources)) * self.n

    def take(self, pairs: list[int]) -> tuple[list[int], BatchLayout]:
        """The rows of some pairs (positions 0..n-1) in this layout's order, and their layout."""
        n, k = self.n, self.k
        rows = [*pairs, *(n + p for p in pairs), *(2 * n + p * k + j for p in pairs for j in range(k))]
        if self.sources:
            rows += [(2 + k) * n + p for p in pairs]
        return rows, BatchLayout(len(pairs), k, self.sources)
