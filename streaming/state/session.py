"""Session stores: one aggregate per (key, session), Kafka Streams' ``SessionStore``, over the same
layers as the other stores (caching, change logging, a :class:`~streaming.state.segments.SegmentedBytesStore`).

Bytes layout (Kafka Streams' ``SessionKeySchema``, also the changelog's key): the key's bytes, the
session end and the session start (8 bytes each, big-endian); segments go by the session end. Values
are the plain aggregate; the changelog record's timestamp is the session end.

Retention goes by session end: sessions that end before ``observed stream time - retention + 1`` (the
store's highest session end written or restored) are never returned, as window stores (see
:mod:`streaming.state.window`; Kafka Streams' ``getActualFrom`` applies to the session end).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

from streaming.state.window import WindowedLayeredStore
from streaming.windows.window import Window, Windowed

_LONG = struct.Struct(">q")
_END_START = struct.Struct(">qq")
_SUFFIX = 16
_MAX_TIME = (1 << 63) - 1


def session_end_of(store_key: bytes) -> int:
    """The session end inside a session store's bytes key (the segmented store's timestamp)."""
    return _LONG.unpack_from(store_key, len(store_key) - _SUFFIX)[0]


class TypedSessionStore(WindowedLayeredStore):
    """A session store (see the module doc). Sessions are ``Windowed(key, Window(start, end))`` with both
    ends inclusive record timestamps."""

    def _windowed(self, raw: bytes) -> Windowed:
        end, start = _END_START.unpack_from(raw, len(raw) - _SUFFIX)
        return Windowed(self._kde(raw[:-_SUFFIX]), Window(start, end))

    # -- writes ---------------------------------------------------------------------------------------------------
    def put(self, session: Windowed, aggregate: Any, headers: Any = None) -> None:
        """Store ``aggregate`` for ``session`` (None removes it); the changelog record's timestamp is the
        session end."""
        end = session[1][1]
        if end > self._written_time:
            self._written_time = end
        raw = self._key(session[0])
        store_key = raw + _END_START.pack(end, session[1][0])
        self._track(raw, store_key)
        self._store.put(store_key, None if aggregate is None else self._vser(aggregate), end, headers)

    def remove(self, session: Windowed) -> None:
        self.put(session, None)

    # -- reads ----------------------------------------------------------------------------------------------------
    def fetch_session(self, key: Any, session_start: int, session_end: int) -> Any:
        """The aggregate of ``key``'s session ``[session_start, session_end]``, or None (also when it expired)."""
        if session_end < self.expiry_floor():
            return None
        return self._value_of(self._store.get(self._key(key) + _END_START.pack(session_end, session_start)))

    def find_sessions(self, key: Any, earliest_session_end: int, latest_session_start: int, owner: bool = False
                      ) -> Iterator[tuple[Windowed, Any]]:
        """``key``'s sessions that end at or after ``earliest_session_end`` and start at or before
        ``latest_session_start`` (the sessions a record at ``t`` may touch: ``t - gap``, ``t + gap``),
        by end time. ``owner=True``: called by the stream thread that owns the store (see
        :meth:`~streaming.state.window.WindowedLayeredStore.owned_scan`)."""
        raw = self._key(key)
        return self._sessions(raw, raw, earliest_session_end, latest_session_start, owner)

    def find_sessions_range(self, key_from: Any, key_to: Any, earliest_session_end: int,
                            latest_session_start: int) -> Iterator[tuple[Windowed, Any]]:
        """As :meth:`find_sessions` for keys in ``[key_from, key_to]`` (serialized order; None: open)."""
        return self._sessions(None if key_from is None else self._key(key_from),
                              None if key_to is None else self._key(key_to), earliest_session_end,
                              latest_session_start)

    def fetch(self, key: Any) -> Iterator[tuple[Windowed, Any]]:
        """Every session of ``key``."""
        return self.find_sessions(key, 0, _MAX_TIME)

    def all(self) -> Iterator[tuple[Windowed, Any]]:
        return self._sessions(None, None, 0, _MAX_TIME)

    def _sessions(self, lo_key: bytes | None, hi_key: bytes | None, earliest_end: int, latest_start: int,
                  owner: bool = False) -> Iterator[tuple[Windowed, Any]]:
        earliest_end = max(earliest_end, self.expiry_floor())
        lo = None if lo_key is None else lo_key + _END_START.pack(max(earliest_end, 0), 0)
        hi = None if hi_key is None else hi_key + _END_START.pack(_MAX_TIME, _MAX_TIME)
        windowed, value, unpack = self._windowed, self._value_of, _END_START.unpack_from
        exact = lo_key is not None and lo_key == hi_key
        entries = self.owned_scan(lo_key, lo, hi) if owner and exact and lo is not None and hi is not None \
            else self.read_raw(lo, hi)
        for raw, data in entries:
            key_bytes = raw[:-_SUFFIX]
            if exact:
                if key_bytes != lo_key:
                    continue
            elif (lo_key is not None and key_bytes < lo_key) or (hi_key is not None and key_bytes > hi_key):
                continue
            end, start = unpack(raw, len(raw) - _SUFFIX)
            if end >= earliest_end and start <= latest_start:
                yield windowed(raw), value(data)

    def __repr__(self) -> str:
        return f"<SessionStore {self.name!r} over {type(self.inner).__name__}>"

