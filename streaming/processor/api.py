"""Public types of the Processor API, after Kafka Streams' ``processor.api`` package."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from streaming.state.api import StateStore

K = TypeVar("K")
V = TypeVar("V")

Headers = list[tuple[str, bytes | None]]


class Record(Generic[K, V]):
    """A key, a value, a timestamp (ms) and headers: what processors receive and forward.

    Records are cheap value objects; ``with_key``/``with_value``/``with_timestamp``/``with_headers``
    return a changed copy.
    """

    __slots__ = ("key", "value", "timestamp", "_headers")

    def __init__(self, key: K, value: V, timestamp: int, headers: Headers | None = None) -> None:
        self.key = key
        self.value = value
        self.timestamp = timestamp
        self._headers = headers

    @property
    def headers(self) -> Headers:
        """The headers as a list of ``(name, bytes)`` pairs (created on first access)."""
        if self._headers is None:
            self._headers = []
        return self._headers

    def with_key(self, key: Any) -> Record[Any, V]:
        return Record(key, self.value, self.timestamp, self._headers)

    def with_value(self, value: Any) -> Record[K, Any]:
        return Record(self.key, value, self.timestamp, self._headers)

    def with_timestamp(self, timestamp: int) -> Record[K, V]:
        return Record(self.key, self.value, timestamp, self._headers)

    def with_headers(self, headers: Headers | None) -> Record[K, V]:
        return Record(self.key, self.value, self.timestamp, headers)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Record) and (self.key, self.value, self.timestamp, self._headers or [])
                == (other.key, other.value, other.timestamp, other._headers or []))

    def __repr__(self) -> str:
        return f"Record(key={self.key!r}, value={self.value!r}, timestamp={self.timestamp}, headers={self._headers!r})"


@dataclass(frozen=True, slots=True)
class RecordContext:
    """Where the record a sink is sending comes from (Kafka Streams' ``processor.RecordContext``), as a topic name
    extractor sees it (``KStream.to(extractor)``, ``Topology.add_sink(name, extractor, ...)``).

    ``topic``, ``partition`` and ``offset`` are those of the input record being processed (``topic`` as the
    topology names it, the logical topic also when the app runs at a later generation; ``partition`` and ``offset``
    are the physical topic's). They are None where no input record is being processed: in a punctuation and for
    what a punctuator forwards. A record a cache flush forwards has the context of the input record that last wrote
    its cached entry. ``timestamp`` and ``headers`` are those of the record being sent (as Kafka Streams' ``SinkNode``
    builds the extractor's context from the record's timestamp and headers).
    """

    topic: str | None
    partition: int | None
    offset: int | None
    timestamp: int
    headers: Headers


TopicNameExtractor = Callable[[Any, Any, RecordContext], str]
"""``extractor(key, value, record_context) -> topic``: the topic a dynamic sink sends each record to (Kafka Streams'
``TopicNameExtractor``). The topic must exist: Brook never creates it (see ``KStream.to``)."""


class PunctuationType(enum.Enum):
    """When a punctuator fires: as stream time (record timestamps) or the wall clock advances."""

    STREAM_TIME = "stream_time"
    WALL_CLOCK_TIME = "wall_clock_time"


class Cancellable:
    """Handle of a scheduled punctuation; ``cancel()`` stops it."""

    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ObservedStreamTime:
    """The highest record timestamp one time-driven node has seen in one task: the time its windows, grace and
    buffers go by (Kafka Streams' ``observedStreamTime`` of its windowed aggregations, session aggregations and
    suppressions, and the ``TimeTracker`` both sides of a stream-stream join share).

    Not the task's stream time: a record an upstream ``filter`` removes, or a table update in the same task,
    moves the task's time but never reaches the node, so it must not close the node's windows. Get one from
    :meth:`ProcessorContext.observed_stream_time`: the task owns it (a task created again starts from what was
    committed, never from a predecessor's uncommitted time) and keeps its value with every commit, so a restarted
    task goes on from the time of its last commit."""

    __slots__ = ("time",)

    def __init__(self) -> None:
        self.time = -1  # no record yet

    def advance(self, timestamp: int) -> int:
        """Move the time to ``timestamp`` if that is later; return the (new) time."""
        if timestamp > self.time:
            self.time = timestamp
        return self.time


T = TypeVar("T", bound=ObservedStreamTime)


class ProcessorContext:
    """What a processor sees of its task: forward records, schedule punctuations, reach stores.

    Record metadata (``topic``, ``partition``, ``offset``, ``headers``) describes the input record being
    processed; it is ``None`` inside a punctuation.
    """

    application_id: str
    task_id: str

    def forward(self, record: Record[Any, Any], to: str | None = None) -> None:
        """Send a record to all child nodes, or only to the child named ``to``."""
        raise NotImplementedError

    def schedule(self, interval: int | timedelta, punctuation_type: PunctuationType,
                 callback: Callable[[int], None]) -> Cancellable:
        """Call ``callback(timestamp)`` every ``interval`` of stream time or wall-clock time.

        Stream-time punctuation fires when stream time (the highest record timestamp the task has seen)
        reaches the next multiple of ``interval``; missed intervals fire once, not once each.
        Wall-clock punctuation fires from the stream thread's loop, never in the middle of a record.
        """
        raise NotImplementedError

    def get_state_store(self, name: str) -> StateStore:
        """The task's instance of a store connected to this processor."""
        raise NotImplementedError

    def commit(self) -> None:
        """Ask for a commit as soon as the current record is done."""
        raise NotImplementedError

    def observed_stream_time(self, key: str, kind: type[T] = ObservedStreamTime) -> T:  # type: ignore[assignment]
        """This task's :class:`ObservedStreamTime` named ``key`` (a name unique in the topology, e.g. the node's
        store name; nodes asking for the same key share one), made as ``kind()`` on first use and set to the time
        of the task's last commit: what the commit recorded for ``key``, else the task's stream time then."""
        raise NotImplementedError

    def record_dropped(self, reason: str, late: bool = False) -> None:
        """Count a record this processor skips on purpose (the ``dropped_records`` metric of the app and of
        the test driver; ``late=True``: a record for a window already closed, also counted as a late drop)
        and log ``reason`` at debug with the record's topic, partition and offset."""
        raise NotImplementedError

    @property
    def topic(self) -> str | None:
        """The topic of the record being processed, as the topology names it (the logical topic, also when the
        app runs at a later generation of it, see ``streaming.topic_generations``; ``partition`` and ``offset``
        are those of the physical topic that carries it). None in a punctuation."""
        raise NotImplementedError

    @property
    def partition(self) -> int | None:
        raise NotImplementedError

    @property
    def offset(self) -> int | None:
        raise NotImplementedError

    @property
    def timestamp(self) -> int:
        raise NotImplementedError

    @property
    def headers(self) -> Headers | None:
        raise NotImplementedError

    @property
    def current_stream_time_ms(self) -> int:
        raise NotImplementedError

    @property
    def current_system_time_ms(self) -> int:
        raise NotImplementedError


class Processor(Generic[K, V]):
    """A node of the topology. Override ``process``; ``init`` and ``close`` are optional.

    One instance exists per task; it is never called from two threads at once.
    """

    context: ProcessorContext

    def init(self, context: ProcessorContext) -> None:
        """Called once before the first record; keep the context to forward and reach stores."""
        self.context = context

    def process(self, record: Record[K, V]) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Called once when the task closes (after its last commit)."""


ProcessorSupplier = Callable[[], Processor[Any, Any]]
