"""Rate limits of a stream thread: token buckets over the records and bytes it takes from its consumer.

``processing.rate.limit.records`` and ``processing.rate.limit.bytes`` (0: off) cap the input one KafkaStreams
instance takes, split evenly over its stream threads. A thread asks :meth:`InputRateLimiter.allowance` how many
records it may take in its next poll; when a bucket is empty it sleeps in slices of at most ``poll.ms`` and
polls between them (so it stays in its group and serves rebalances), instead of buffering what it cannot
process yet. What a poll returned is charged with :meth:`InputRateLimiter.charge`; a poll may overshoot the
bytes bucket by one batch, which later polls pay back, so the long-run rate stays at the limit.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

#: A bucket holds at most this many seconds of its rate (the largest burst after an idle spell).
BURST_SECONDS = 0.1
#: Refills are floating-point sums of elapsed time times the rate: counts within this of a whole are that whole.
EPSILON = 1e-6


class TokenBucket:
    """``rate`` tokens per second, holding at most ``capacity`` (default: :data:`BURST_SECONDS` of the rate,
    at least 1). Taking more than it holds puts it in debt, which refilling pays back first."""

    def __init__(self, rate: float, capacity: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if rate <= 0:
            raise ValueError(f"a token bucket needs a positive rate, got {rate}")
        self.rate = float(rate)
        self.capacity = float(capacity) if capacity is not None else max(self.rate * BURST_SECONDS, 1.0)
        self._clock = clock
        self._tokens = self.capacity
        self._updated = clock()

    @property
    def tokens(self) -> float:
        """Tokens available now (negative: the debt still to pay back)."""
        now = self._clock()
        self._tokens = min(self.capacity, self._tokens + (now - self._updated) * self.rate)
        self._updated = now
        return self._tokens

    def take(self, amount: float) -> None:
        """Take ``amount`` tokens, going into debt if the bucket holds fewer."""
        self._tokens = self.tokens - amount

    def wait_seconds(self, amount: float = 1.0) -> float:
        """How long until the bucket holds ``amount`` tokens (0: it does now)."""
        missing = amount - self.tokens
        return missing / self.rate if missing > EPSILON else 0.0

    def whole_tokens(self) -> int:
        """The whole tokens available now (0 when in debt)."""
        return max(int(self.tokens + EPSILON), 0)


class InputRateLimiter:
    """The records and/or bytes limit of one stream thread (``None`` for a limit that is off)."""

    def __init__(self, records_per_second: float | None, bytes_per_second: float | None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.records = TokenBucket(records_per_second, clock=clock) if records_per_second else None
        self.bytes = TokenBucket(bytes_per_second, clock=clock) if bytes_per_second else None
        self._record_bytes: float | None = None  # average size of the records last charged (bytes limit)

    def allowance(self, max_records: int) -> int:
        """How many records the next poll may take (at most ``max_records``; 0: none until :meth:`wait_seconds`).
        Under a bytes limit: as many as the bucket holds at the size of the records last taken (1 at first)."""
        allowed = max_records
        if self.bytes is not None:
            if self.bytes.wait_seconds(0.0):
                return 0
            allowed = 1 if self._record_bytes is None else max(int(self.bytes.tokens / self._record_bytes), 1)
        if self.records is not None:
            allowed = min(allowed, self.records.whole_tokens())
        return min(allowed, max_records)

    def wait_seconds(self) -> float:
        """How long until :meth:`allowance` is at least 1."""
        return max(self.records.wait_seconds(1.0) if self.records is not None else 0.0,
                   self.bytes.wait_seconds(0.0) if self.bytes is not None else 0.0)

    def charge(self, messages: Sequence[Any]) -> None:
        """Charge what a poll returned: its records, and the bytes of their keys and values."""
        if self.records is not None:
            self.records.take(sum(1 for m in messages if m.error() is None))
        if self.bytes is not None:
            sizes = [len(m.value() or b"") + len(m.key() or b"") for m in messages if m.error() is None]
            if sizes:
                self.bytes.take(sum(sizes))
                self._record_bytes = max(sum(sizes) / len(sizes), 1.0)


def thread_rate_limiter(records_per_second: int, bytes_per_second: int, threads: int) -> InputRateLimiter | None:
    """One stream thread's share of the instance's limits (``0``: off), or None when both are off."""
    if not records_per_second and not bytes_per_second:
        return None
    return InputRateLimiter(records_per_second / threads if records_per_second else None,
                            bytes_per_second / threads if bytes_per_second else None)
