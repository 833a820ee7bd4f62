"""``Window`` and ``Windowed``: a time interval, and a key paired with the window it was aggregated in."""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple


class Window(NamedTuple):
    """A window ``[start, end)`` in epoch milliseconds (a session window ``[start, end]``: both ends are
    record timestamps, as in Kafka Streams' SessionWindow)."""

    start: int
    end: int


class Windowed(NamedTuple):
    """The key of a windowed aggregation's result: the record key and its window.

    ``Windowed("a", Window(0, 60_000))``; ``Windowed.of("a", 0, 60_000)`` builds the same key.
    """

    key: Any
    window: Window

    @classmethod
    def of(cls, key: Any, start: int, end: int) -> Windowed:
        """``Windowed(key, Window(start, end))``."""
        return cls(key, Window(start, end))

    @property
    def start(self) -> int:
        return self.window.start

    @property
    def end(self) -> int:
        return self.window.end


#: ``window_of((start, end))`` is ``Window(start, end)``, and ``windowed_of((key, window))`` ``Windowed(key, window)``,
#: without the NamedTuple constructor's Python call (per-record and per-flushed-entry paths).
window_of = partial(tuple.__new__, Window)
windowed_of = partial(tuple.__new__, Windowed)
