"""Models of Kafka Streams' time rules, written from its source, record by record: what the tests compare Brook's
output with (never Brook's own output). Each class cites the Kafka Streams code it follows.

The models count; the tests pipe the same records through Brook's public API (the test driver) and compare every
emitted update and every drop.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field


@dataclass
class TimeWindowCount:
    """``KStreamWindowAggregate.process``: the aggregation's own ``observedStreamTime`` (moved only by records that
    reach it with a key), ``windowCloseTime = observedStreamTime - grace``; each window of ``windowsFor(t)`` is
    updated while ``windowEnd > windowCloseTime``, else the record is dropped from it (one drop per window)."""

    size: int
    advance: int
    grace: int
    observed: int = -1
    drops: int = 0
    counts: dict[tuple[str, int], int] = field(default_factory=dict)

    def windows_for(self, t: int) -> list[int]:
        start = max(0, t - self.size + self.advance) // self.advance * self.advance
        return list(range(start, t + 1, self.advance))

    def process(self, key: str, t: int) -> list[tuple[str, int, int]]:
        """The updates ``(key, window start, count)`` in the order Kafka Streams forwards them."""
        self.observed = max(self.observed, t)
        close = self.observed - self.grace
        out = []
        for start in self.windows_for(t):
            if start + self.size > close:
                count = self.counts[(key, start)] = self.counts.get((key, start), 0) + 1
                out.append((key, start, count))
            else:
                self.drops += 1
        return out


@dataclass
class SessionCount:
    """``KStreamSessionWindowAggregate.process`` over a session store: the aggregation's ``observedStreamTime``,
    ``windowCloseTime = observedStreamTime - grace - gap``; ``findSessions(key, t - gap, t + gap)`` reads the store,
    which returns no session ending before its own observed time (the highest session end written)
    ``- retention + 1`` (``AbstractRocksDBSegmentedBytesStore.getActualFrom``; the in-memory store removes them),
    retention ``gap + grace`` by default; a merged session ending before ``windowCloseTime`` drops the record;
    otherwise each merged-away session is removed (a tombstone forwarded) and the merged one put."""

    gap: int
    grace: int
    retention: int | None = None
    observed: int = -1
    store_time: int = -1
    drops: int = 0
    sessions: dict[str, list[list[int]]] = field(default_factory=lambda: defaultdict(list))  # [start, end, count]

    def __post_init__(self) -> None:
        if self.retention is None:
            self.retention = self.gap + self.grace

    def process(self, key: str, t: int) -> list[tuple[str, int, int, int | None]]:
        """The updates ``(key, start, end, count or None)`` in the order Kafka Streams forwards them."""
        assert self.retention is not None
        self.observed = max(self.observed, t)
        close = self.observed - self.grace - self.gap
        floor = self.store_time - self.retention + 1
        touching = sorted((s for s in self.sessions[key] if s[1] >= max(t - self.gap, floor) and s[0] <= t + self.gap),
                          key=lambda s: (s[1], s[0]))
        start = min([t] + [s[0] for s in touching])
        end = max([t] + [s[1] for s in touching])
        if end < close:
            self.drops += 1
            return []
        out: list[tuple[str, int, int, int | None]] = []
        for s in touching:
            self.sessions[key].remove(s)
            if (s[0], s[1]) != (start, end):
                out.append((key, s[0], s[1], None))
        merged = [start, end, sum(s[2] for s in touching) + 1]
        self.sessions[key].append(merged)
        self.store_time = max(self.store_time, end)
        out.append((key, start, end, merged[2]))
        return out

    def emitted(self) -> dict[tuple[str, int, int], int]:
        """Every session forwarded and not retracted."""
        return {(key, s[0], s[1]): s[2] for key, found in self.sessions.items() for s in found}

    def kept(self) -> dict[tuple[str, int, int], int]:
        """The sessions the store still returns."""
        assert self.retention is not None
        floor = self.store_time - self.retention + 1
        return {window: count for window, count in self.emitted().items() if window[2] >= floor}


@dataclass
class SlidingCount:
    """``KStreamSlidingWindowAggregate.process`` / ``processInOrder`` for records at or after ``d`` (no early
    records): ``closeTime = observedStreamTime - grace``; a record whose right window ``[t + 1, t + 1 + d]`` is
    already closed (``t + 1 + d <= closeTime``) is dropped whole. Otherwise the key's windows starting in
    ``[t - 2d, t + 1]`` are read by start: a window ending before ``t`` becomes the left-window aggregate and names
    the previous record (its highest timestamp); one ending at ``t`` is ``t``'s own left window (updated; it names the
    previous record if its highest timestamp is before ``t``); one containing ``t`` is updated and is the right-window
    aggregate; one starting at ``t + 1`` is ``t``'s right window. Then ``createWindows``: the previous record's right
    window ``[p + 1, p + 1 + d]`` if missing and ``t`` falls in it; ``t``'s left window ``[t - d, t]`` if missing
    (from the left-window aggregate when ``p >= t - d``); ``t``'s right window, a copy of the right-window
    aggregate, if missing and that aggregate holds a record after ``t``. A window is updated while ``windowEnd >=
    closeTime`` (``updateWindowAndForward``: both ends inclusive), else the record is dropped from it."""

    d: int
    grace: int
    observed: int = -1
    drops: int = 0
    windows: dict[str, dict[int, tuple[int, int]]] = field(default_factory=lambda: defaultdict(dict))

    def process(self, key: str, t: int) -> list[tuple[str, int, int, int]]:
        """The updates ``(key, start, end, count)`` in the order Kafka Streams forwards them."""
        assert t >= self.d, "early records are not modelled"
        d = self.d
        self.observed = max(self.observed, t)
        close = self.observed - self.grace
        if t + 1 + d <= close:
            self.drops += 1
            return []
        windows, out = self.windows[key], []

        def update(start: int, aggregate: tuple[int, int] | None) -> None:
            if start + d >= close:
                count, newest = (0, t) if aggregate is None else aggregate
                windows[start] = (count + 1, max(t, newest))
                out.append((key, start, start + d, count + 1))
            else:
                self.drops += 1
        fetched = sorted(s for s in windows if max(0, t - 2 * d) <= s <= t + 1)
        left = right = previous = None
        left_made = right_made = False
        for start in fetched:
            aggregate, end = windows[start], start + d
            if end < t:
                left, previous = aggregate, aggregate[1]
            elif end == t:
                left_made = True
                if aggregate[1] < t:
                    previous = aggregate[1]
                update(start, aggregate)
            elif start <= t:
                right = aggregate
                update(start, aggregate)
            else:
                right_made = True
        if previous is not None and previous + 1 not in fetched and previous + 1 + d >= t:
            update(previous + 1, None)
        if not left_made:
            update(t - d, left if previous is not None and t - d <= previous else None)
        if not right_made and right is not None and right[1] > t:
            windows[t + 1] = right
            out.append((key, t + 1, t + 1 + d, right[0]))
        return out


@dataclass
class InnerStreamJoin:
    """``KStreamKStreamJoin`` (inner) after ``KStreamJoinWindow``: a record is first put into its own side's window
    store, then joined with every record of the other side's store for its key in ``[t - before, t + after]``
    (``before``/``after`` swapped for the right side), in store order (timestamp, then arrival). A window store
    never returns a record older than its own observed time (the highest timestamp put into it) ``- retention +
    1``, retention being ``before + after + grace`` (``getActualFrom``)."""

    before: int
    after: int
    grace: int
    stores: dict[str, list[tuple[str, int, str]]] = field(default_factory=lambda: {"l": [], "r": []})
    store_time: dict[str, int] = field(default_factory=lambda: {"l": -1, "r": -1})

    def process(self, side: str, key: str, t: int, value: str) -> list[tuple[str, str, int]]:
        """The results ``(key, "left+right", timestamp)`` in the order Kafka Streams forwards them."""
        other = "r" if side == "l" else "l"
        self.stores[side].append((key, t, value))
        self.store_time[side] = max(self.store_time[side], t)
        before, after = (self.before, self.after) if side == "l" else (self.after, self.before)
        floor = self.store_time[other] - (self.before + self.after + self.grace) + 1
        low, high = max(0, t - before, floor), max(0, t + after)
        found = sorted(((ts, n, v) for n, (k, ts, v) in enumerate(self.stores[other]) if k == key and low <= ts <= high))
        return [(key, f"{value}+{v}" if side == "l" else f"{v}+{value}", max(t, ts)) for ts, _, v in found]
