"""Where each kind of row sits in a tokenised training batch."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BatchLayout:
    """Rows [a_1..a_n, b_1..b_n, negatives, sources]: `k` hard negatives per pair, row-major
    (pair i's at 2n + i*k ... 2n + i*k + k - 1), then one source sentence per pair when
    `sources`. With k = 0 and no sources it is the plain [a..., b...] batch.

    `holders` (pairs whose snapshot gives negatives to only some): the positions of the pairs
    that carry their k, in order; only their rows are in the batch. None: every pair has k."""

    n: int
    k: int = 0
    sources: bool = False
    holders: tuple[int, ...] | None = None

    @property
    def a(self) -> slice:
        return slice(0, self.n)

    @property
    def b(self) -> slice:
        return slice(self.n, 2 * self.n)

    @property
    def negative_rows(self) -> int:
        return self.k * (self.n if self.holders is None else len(self.holders))

    @property
    def negatives(self) -> slice:
        return slice(2 * self.n, 2 * self.n + self.negative_rows)

    def negative_slots(self) -> list[int]:
        """Each negative row's place among n*k (pair i's at i*k ... i*k + k - 1)."""
        holders = range(self.n) if self.holders is None else self.holders
        return [p * self.k + j for p in holders for j in range(self.k)]

    @property
    def source(self) -> slice:
        """The source sentences' rows; view a's when the batch carries none."""
        start = self.negatives.stop
        return slice(start, start + self.n) if self.sources else self.a

    @property
    def rows(self) -> int:
        return 2 * self.n + self.negative_rows + self.n * int(self.sources)

    def take(self, pairs: list[int]) -> tuple[list[int], BatchLayout]:
        """The rows of some pairs (positions 0..n-1) in this layout's order, and their layout."""
        n, k = self.n, self.k
        held = list(range(n)) if self.holders is None else list(self.holders)
        where = {p: i for i, p in enumerate(held)}
        kept = [p for p in pairs if p in where]
        rows = [*pairs, *(n + p for p in pairs), *(2 * n + where[p] * k + j for p in kept for j in range(k))]
        if self.sources:
            rows += [self.negatives.stop + p for p in pairs]
        holders = None if self.holders is None else tuple(i for i, p in enumerate(pairs) if p in where)
        return rows, BatchLayout(len(pairs), k, self.sources, holders)
