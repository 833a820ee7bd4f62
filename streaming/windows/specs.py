"""Window specifications, as Kafka Streams 3.x defines them: ``TimeWindows`` (tumbling and hopping),
``SlidingWindows``, ``SessionWindows`` and ``JoinWindows``.

Durations are milliseconds (an ``int``) or a ``datetime.timedelta``. A bad value raises ``ValueError``
at construction, naming the argument.

Grace: how long after a window ends it still accepts out-of-order records. A window is *closed* once
``window end <= stream time - grace`` (stream time: the highest record timestamp the task has seen);
records for a closed window are dropped and counted. When ``grace`` is not given it is **0**, as Kafka
Streams 3.x's ``ofSizeWithNoGrace`` / ``ofTimeDifferenceWithNoGrace`` / ``ofInactivityGapWithNoGrace``
(the pre-3.0 default of 24 hours minus the window size is not kept: it held every window open for a day).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from streaming.windows.window import Window

Duration = int | timedelta


def duration_ms(value: Any, what: str, *, positive: bool) -> int:
    """``value`` (ms or timedelta) as an int of milliseconds; ``what`` names it in the error."""
    millis = value
    if isinstance(value, timedelta):
        millis = value // timedelta(milliseconds=1)
    if not isinstance(millis, int) or isinstance(millis, bool):
        raise ValueError(f"{what} must be milliseconds (an int) or a timedelta, got {value!r}")
    if millis < 0 or (positive and millis == 0):
        raise ValueError(f"{what} must be {'positive' if positive else 'zero or more'}, got {value!r}")
    return millis


@dataclass(frozen=True)
class TimeWindows:
    """Fixed-size windows aligned to the epoch: tumbling (``advance == size``, each record in exactly one
    window) or hopping (``advance_by(step)``, a record in every window ``[start, start + size)`` that
    contains it, windows starting at multiples of ``advance``). ``end`` is exclusive."""

    size_ms: int
    advance_ms: int
    grace_ms: int

    @classmethod
    def of(cls, size: Duration, grace: Duration = 0) -> TimeWindows:
        """Tumbling windows of ``size``; ``grace`` defaults to 0 (Kafka Streams' ``ofSizeWithNoGrace``;
        with ``grace`` it is ``ofSizeAndGrace``)."""
        size_ms = duration_ms(size, "TimeWindows.of: size", positive=True)
        return cls(size_ms, size_ms, duration_ms(grace, "TimeWindows.of: grace", positive=False))

    @classmethod
    def of_size_with_no_grace(cls, size: Duration) -> TimeWindows:
        return cls.of(size)

    @classmethod
    def of_size_and_grace(cls, size: Duration, grace: Duration) -> TimeWindows:
        return cls.of(size, grace)

    def advance_by(self, advance: Duration) -> TimeWindows:
        """Hopping windows: a new window every ``advance`` (``0 < advance <= size``)."""
        advance_ms = duration_ms(advance, "TimeWindows.advance_by: advance", positive=True)
        if advance_ms > self.size_ms:
            raise ValueError(f"TimeWindows.advance_by: advance ({advance_ms} ms) must not exceed the window "
                             f"size ({self.size_ms} ms)")
        return dataclasses.replace(self, advance_ms=advance_ms)

    def grace(self, grace: Duration) -> TimeWindows:
        return dataclasses.replace(self, grace_ms=duration_ms(grace, "TimeWindows.grace: grace", positive=False))

    def size(self) -> int:
        return self.size_ms

    def windows_for(self, timestamp: int) -> list[Window]:
        """Every window containing ``timestamp``, earliest first (Kafka Streams' ``windowsFor``)."""
        size, advance = self.size_ms, self.advance_ms
        start = max(0, timestamp - size + advance)
        start -= start % advance
        windows = []
        while start <= timestamp:
            windows.append(Window(start, start + size))
            start += advance
        return windows

    def retention_ms(self) -> int:
        """How long a window store keeps a window by default: size + grace."""
        return self.size_ms + self.grace_ms


@dataclass(frozen=True)
class SlidingWindows:
    """Windows defined by the records themselves (KIP-450): every window ``[t - max_difference, t]``
    ending at a record's timestamp ``t`` (its *left* window) and, when a later record falls within
    ``max_difference``, the window ``[t + 1, t + 1 + max_difference]`` just after it (its *right*
    window). Both ends are inclusive; each distinct set of records gets exactly one window.
    Records earlier than ``max_difference`` go into the window ``[0, max_difference]``."""

    time_difference_ms: int
    grace_ms: int

    @classmethod
    def of(cls, max_difference: Duration, grace: Duration = 0) -> SlidingWindows:
        """``grace`` defaults to 0 (Kafka Streams' ``ofTimeDifferenceWithNoGrace``)."""
        return cls(duration_ms(max_difference, "SlidingWindows.of: max_difference", positive=True),
                   duration_ms(grace, "SlidingWindows.of: grace", positive=False))

    def size(self) -> int:
        return self.time_difference_ms

    def retention_ms(self) -> int:
        """A record reads windows back ``2 * max_difference``: kept that long plus grace."""
        return 2 * self.time_difference_ms + self.grace_ms


@dataclass(frozen=True)
class SessionWindows:
    """Sessions per key: records less than or exactly ``gap`` apart belong to one session
    ``[first record, last record]``; a record bridging two sessions merges them."""

    gap_ms: int
    grace_ms: int

    @classmethod
    def with_inactivity_gap(cls, gap: Duration, grace: Duration = 0) -> SessionWindows:
        """``grace`` defaults to 0 (Kafka Streams' ``ofInactivityGapWithNoGrace``)."""
        return cls(duration_ms(gap, "SessionWindows.with_inactivity_gap: gap", positive=True),
                   duration_ms(grace, "SessionWindows.with_inactivity_gap: grace", positive=False))

    def inactivity_gap(self) -> int:
        return self.gap_ms

    def retention_ms(self) -> int:
        return self.gap_ms + self.grace_ms


@dataclass(frozen=True)
class JoinWindows:
    """How far apart two records' timestamps may be for a KStream-KStream join: a left record at ``t``
    joins right records in ``[t - before, t + after]``. ``of(diff)`` sets both to ``diff``; ``before``
    and ``after`` change one side (the other stays)."""

    before_ms: int
    after_ms: int
    grace_ms: int

    @classmethod
    def of(cls, time_difference: Duration, grace: Duration = 0) -> JoinWindows:
        """``grace`` defaults to 0 (Kafka Streams' ``ofTimeDifferenceWithNoGrace``)."""
        diff = duration_ms(time_difference, "JoinWindows.of: time_difference", positive=False)
        return cls(diff, diff, duration_ms(grace, "JoinWindows.of: grace", positive=False))

    def before(self, time_difference: Duration) -> JoinWindows:
        return dataclasses.replace(
            self, before_ms=duration_ms(time_difference, "JoinWindows.before: time_difference", positive=False))

    def after(self, time_difference: Duration) -> JoinWindows:
        return dataclasses.replace(
            self, after_ms=duration_ms(time_difference, "JoinWindows.after: time_difference", positive=False))

    def size(self) -> int:
        return self.before_ms + self.after_ms

    def retention_ms(self) -> int:
        return self.before_ms + self.after_ms + self.grace_ms
