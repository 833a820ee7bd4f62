"""Punctuation schedules of one task, for stream time and for wall-clock time."""

from __future__ import annotations

from collections.abc import Callable

from streaming.processor.api import Cancellable


class PunctuationSchedule:
    __slots__ = ("next_time", "interval", "callback", "handle", "node")

    def __init__(self, next_time: int, interval: int, callback: Callable[[int], None], node: str) -> None:
        self.next_time = next_time
        self.interval = interval
        self.callback = callback
        self.handle = Cancellable()
        self.node = node

    def advance(self, now: int) -> None:
        """Next firing time after ``now``; missed intervals are skipped (they fire once, not each)."""
        following = self.next_time + self.interval
        if now >= following:
            following = self.next_time + ((now - self.next_time) // self.interval + 1) * self.interval
        self.next_time = following


class PunctuationQueue:
    """Schedules of one kind (stream or wall-clock time); ``due(now)`` says whether any should fire."""

    def __init__(self) -> None:
        self._schedules: list[PunctuationSchedule] = []
        self.next_time = 2**63  # earliest next_time of live schedules; cheap check on the hot path

    def add(self, schedule: PunctuationSchedule) -> Cancellable:
        self._schedules.append(schedule)
        self.next_time = min(self.next_time, schedule.next_time)
        return schedule.handle

    def next_times(self) -> dict[str, list[int]]:
        """When each live schedule fires next, per node, in the order the node scheduled them."""
        times: dict[str, list[int]] = {}
        for schedule in self._schedules:
            if not schedule.handle.cancelled:
                times.setdefault(schedule.node, []).append(schedule.next_time)
        return times

    def set_next_times(self, times: dict[str, list[int]]) -> None:
        """Go on from :meth:`next_times` of an earlier run of the same processors (a schedule it does not name keeps
        its own time)."""
        seen: dict[str, int] = {}
        for schedule in self._schedules:
            if schedule.handle.cancelled:
                continue
            index = seen[schedule.node] = seen.get(schedule.node, -1) + 1
            known = times.get(schedule.node, [])
            if index < len(known):
                schedule.next_time = known[index]
        live = [s.next_time for s in self._schedules if not s.handle.cancelled]
        self.next_time = min(live, default=2**63)

    def punctuate(self, now: int, fire: Callable[[PunctuationSchedule, int], None]) -> bool:
        """Fire every schedule due at ``now`` through ``fire``; return whether any fired."""
        fired = False
        for schedule in list(self._schedules):
            if schedule.handle.cancelled:
                self._schedules.remove(schedule)
            elif now >= schedule.next_time:
                schedule.advance(now)
                fire(schedule, now)
                fired = True
        live = [s.next_time for s in self._schedules if not s.handle.cancelled]
        self.next_time = min(live, default=2**63)
        return fired
