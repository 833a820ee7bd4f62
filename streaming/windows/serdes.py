"""Serdes of windowed keys, in Kafka Streams' byte formats, so windowed topics are shared with JVM apps.

- time-windowed (``TimeWindowedSerializer``): the inner key's bytes, then the window start (8 bytes,
  big-endian). The end is not written: the deserializer adds the window size to the start.
- session-windowed (``SessionWindowedSerializer``): the inner key's bytes, the session end, then its
  start (8 bytes each, big-endian).

A windowed table's ``to_stream().to(topic)`` writes its keys this way without a serde being named; a
reader of such a topic uses ``WindowedSerdes.time_windowed(Serdes.String(), size)`` (or
``session_windowed``).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from streaming.serdes import Serde
from streaming.windows.window import Window, Windowed

_LONG = struct.Struct(">q")
_TWO_LONGS = struct.Struct(">qq")


class WindowedSerde(Serde[Windowed]):
    """A serde of ``Windowed`` keys around the serde of the plain key (``inner``).

    ``inner`` may be None: the key serde of the grouping was the config's default, which the runtime
    fills in (:meth:`with_default_inner`) when it builds the sink.
    """

    session = False

    def __init__(self, inner: Serde[Any] | None, window_size_ms: int) -> None:
        self.inner = inner
        self.window_size_ms = window_size_ms

    def with_default_inner(self, default: Serde[Any]) -> WindowedSerde:
        """This serde with ``default`` as its key serde if it has none."""
        return self if self.inner is not None else type(self)(default, self.window_size_ms)

    def _inner(self) -> Serde[Any]:
        if self.inner is None:
            raise ValueError("a windowed serde without a key serde: give one, e.g. "
                             "WindowedSerdes.time_windowed(Serdes.String(), size)")
        return self.inner

    def serialize(self, obj: Windowed | None) -> bytes | None:
        if obj is None:
            return None
        key = (self.inner or self._inner()).serialize(obj[0])
        if key is None:
            raise ValueError(f"windowed key {obj!r}: its key serializes to None")
        return key + _LONG.pack(obj[1][0])

    def not_none_serializer(self) -> Callable[[Windowed], bytes | None]:
        """:meth:`serialize` in one frame: the key's own not-None serializer (a C function for the built-in serdes),
        then the start (a sink's and a suppression's path, once per windowed result)."""
        if type(self).serialize is not WindowedSerde.serialize or self.inner is None:
            return self.serialize
        inner = self.inner
        key_of, key_of_null, pack = inner.not_none_serializer(), inner.serialize, _LONG.pack

        def serialize(obj: Windowed) -> bytes | None:
            key = obj[0]
            raw = key_of(key) if key is not None else key_of_null(key)
            if raw is None:
                raise ValueError(f"windowed key {obj!r}: its key serializes to None")
            return raw + pack(obj[1][0])
        return serialize

    def deserialize(self, data: bytes | None) -> Windowed | None:
        if data is None:
            return None
        if len(data) < 8:
            raise ValueError(f"a time-windowed key needs at least 8 bytes, got {len(data)}")
        start = _LONG.unpack_from(data, len(data) - 8)[0]
        return Windowed((self.inner or self._inner()).deserialize(data[:-8]), Window(start, start + self.window_size_ms))

    def __repr__(self) -> str:
        return f"WindowedSerdes.time_windowed({self.inner!r}, {self.window_size_ms})"


class SessionWindowedSerde(WindowedSerde):
    """Session-windowed keys: ``key bytes + end + start``."""

    session = True

    def __init__(self, inner: Serde[Any] | None, window_size_ms: int = 0) -> None:
        super().__init__(inner, window_size_ms)

    def serialize(self, obj: Windowed | None) -> bytes | None:
        if obj is None:
            return None
        key = self._inner().serialize(obj[0])
        if key is None:
            raise ValueError(f"windowed key {obj!r}: its key serializes to None")
        return key + _TWO_LONGS.pack(obj[1][1], obj[1][0])

    def deserialize(self, data: bytes | None) -> Windowed | None:
        if data is None:
            return None
        if len(data) < 16:
            raise ValueError(f"a session-windowed key needs at least 16 bytes, got {len(data)}")
        end, start = _TWO_LONGS.unpack_from(data, len(data) - 16)
        return Windowed(self._inner().deserialize(data[:-16]), Window(start, end))

    def __repr__(self) -> str:
        return f"WindowedSerdes.session_windowed({self.inner!r})"


class WindowedSerdes:
    """Factory of windowed-key serdes (Kafka Streams' ``WindowedSerdes``)."""

    @staticmethod
    def time_windowed(inner: Serde[Any], window_size: int) -> WindowedSerde:
        """Keys of a time-windowed (tumbling, hopping or sliding) table; ``window_size`` in ms gives
        the end of deserialized windows."""
        return WindowedSerde(inner, window_size)

    @staticmethod
    def session_windowed(inner: Serde[Any]) -> SessionWindowedSerde:
        return SessionWindowedSerde(inner)
