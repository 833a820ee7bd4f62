"""A cheap latency histogram the stream thread fills once per batch or commit (never per record)."""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

#: Bucket upper bounds in seconds, from 0.5 ms to 60 s (latencies of batches, commits and records).
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


@dataclass(frozen=True)
class HistogramSnapshot:
    """Cumulative counts per upper bound (the last bound is ``+Inf``), the sum and the count."""

    buckets: list[tuple[float, int]]
    total: float
    count: int


class Histogram:
    """Counts observations per bucket. Written by one thread; read (copied) by the scraping thread."""

    __slots__ = ("_bounds", "_counts", "_sum")

    def __init__(self, bounds: tuple[float, ...] = LATENCY_BUCKETS) -> None:
        self._bounds = bounds
        self._counts = [0] * (len(bounds) + 1)  # the last bucket: above every bound (+Inf)
        self._sum = 0.0

    def observe(self, seconds: float) -> None:
        self._counts[bisect_left(self._bounds, seconds)] += 1
        self._sum += seconds

    def snapshot(self) -> HistogramSnapshot:
        counts = list(self._counts)
        cumulative, running = [], 0
        for bound, count in zip((*self._bounds, float("inf")), counts, strict=True):
            running += count
            cumulative.append((bound, running))
        return HistogramSnapshot(cumulative, self._sum, running)
