"""The ProcessorContext a Processor API node gets: one per node per task."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from streaming.errors import TopologyError
from streaming.processor.api import (
    Cancellable,
    Headers,
    ObservedStreamTime,
    ProcessorContext,
    PunctuationType,
    Record,
    T,
)
from streaming.serdes import Serde
from streaming.state.api import StateStore
from streaming.topology.nodes import Emit

if TYPE_CHECKING:
    from streaming.runtime.external_sinks import ExternalSink
    from streaming.runtime.task import StreamTask

log = logging.getLogger(__name__)


def to_millis(interval: int | timedelta, what: str) -> int:
    """Milliseconds from an int or a timedelta; must be positive."""
    millis = int(interval.total_seconds() * 1000) if isinstance(interval, timedelta) else interval
    if not isinstance(millis, int) or isinstance(millis, bool) or millis <= 0:
        raise ValueError(f"{what} must be a positive number of milliseconds or a timedelta, got {interval!r}")
    return millis


def fan_out(emits: list[Emit]) -> Emit:
    """One function calling every child in order (or the only child directly)."""
    if not emits:
        return _drop
    if len(emits) == 1:
        return emits[0]
    targets = tuple(emits)

    def emit(key: Any, value: Any, timestamp: int, headers: Any) -> None:
        for target in targets:
            target(key, value, timestamp, headers)
    return emit


def _drop(key: Any, value: Any, timestamp: int, headers: Any) -> None:
    """A node without children forwards nowhere."""


class NodeContext(ProcessorContext):
    """Context of one processor node in one task: forwards to that node's children."""

    def __init__(self, task: StreamTask, node_name: str, children: dict[str, Emit], stores: list[str]) -> None:
        self._task = task
        self._node = node_name
        self._children = children
        self._emit = fan_out(list(children.values()))
        self._stores = stores
        self.application_id = task.application_id
        self.task_id = task.id

    def forward(self, record: Record[Any, Any], to: str | None = None) -> None:
        """Forward to every child, or to child ``to``. In a punctuation each child gets the record on its own, and
        an error there goes to ``processing.exception.handler`` (see ``StreamTask.forward_punctuated``)."""
        if to is None:
            if self._task.punctuating is None:
                self._emit(record.key, record.value, record.timestamp, record._headers)
            else:
                for emit in self._children.values():
                    self._task.forward_punctuated(emit, record.key, record.value, record.timestamp, record._headers)
            return
        child = self._children.get(to)
        if child is None:
            raise TopologyError(f"processor {self._node!r} forwarded to {to!r}, which is not one of its "
                                f"children {list(self._children)}")
        if self._task.punctuating is None:
            child(record.key, record.value, record.timestamp, record._headers)
        else:
            self._task.forward_punctuated(child, record.key, record.value, record.timestamp, record._headers)

    def schedule(self, interval: int | timedelta, punctuation_type: PunctuationType,
                 callback: Callable[[int], None]) -> Cancellable:
        if not isinstance(punctuation_type, PunctuationType):
            raise ValueError(f"punctuation_type must be a PunctuationType, got {punctuation_type!r}")
        return self._task.schedule(to_millis(interval, "punctuation interval"), punctuation_type, callback,
                                   self._node)

    def get_state_store(self, name: str) -> StateStore:
        """A store connected to this processor, or any global store (read-only)."""
        if name not in self._stores:
            global_store = self._task.global_stores.get(name)
            if global_store is not None:
                return global_store
            raise TopologyError(f"processor {self._node!r} has no access to state store {name!r}; connect it "
                                f"with add_state_store(builder, {self._node!r}) or process(supplier, {name!r})")
        return self._task.stores[name]

    @property
    def default_key_serde(self) -> Serde[Any]:
        """The config's ``default.key.serde`` (Kafka Streams' ``context.keySerde()``)."""
        return self._task.config.default_key_serde

    @property
    def default_value_serde(self) -> Serde[Any]:
        """The config's ``default.value.serde`` (Kafka Streams' ``context.valueSerde()``)."""
        return self._task.config.default_value_serde

    def record_dropped(self, reason: str, late: bool = False) -> None:
        """Count a record this node skips on purpose (the task's ``dropped_records``; ``late``: a record for
        a closed window, also counted in ``late_records``) and log it at debug."""
        task = self._task
        task.dropped_records += 1
        if late:
            task.late_records += 1
        if log.isEnabledFor(logging.DEBUG):
            current = task.current
            where = "" if current is None else \
                f" (topic={current.topic()}, partition={current.partition()}, offset={current.offset()})"
            log.debug("task %s: %s skipped a record: %s%s", task.id, self._node, reason, where)

    def commit(self) -> None:
        self._task.commit_requested = True

    def observed_stream_time(self, key: str, kind: type[T] = ObservedStreamTime) -> T:  # type: ignore[assignment]
        return self._task.observed_stream_time(key, kind)

    @property
    def topic(self) -> str | None:
        current = self._task.current
        return None if current is None else self._task.generations.logical(current.topic())

    @property
    def partition(self) -> int | None:
        current = self._task.current
        return None if current is None else current.partition()

    @property
    def task_partition(self) -> int:
        """The partition number of this node's task (of every topic the task reads)."""
        return self._task.partition

    @property
    def offset(self) -> int | None:
        current = self._task.current
        return None if current is None else current.offset()

    @property
    def timestamp(self) -> int:
        return self._task.current_timestamp

    @property
    def headers(self) -> Headers | None:
        current = self._task.current
        return None if current is None else current.headers()

    @property
    def current_stream_time_ms(self) -> int:
        return self._task.stream_time

    @property
    def current_system_time_ms(self) -> int:
        return self._task.clock()

    # -- for nodes that write outside Kafka (streaming.runtime.external_sinks) ---------------------------------
    @property
    def external_sinks_enabled(self) -> bool:
        """Whether nodes that write outside Kafka write (``external.sinks.enabled``; false in batch reprocessing)."""
        return bool(self._task.config["external.sinks.enabled"])

    @property
    def reset_epoch(self) -> str:
        """The application's reset epoch (``none`` before the first reset; see streaming.runtime.reset_epoch)."""
        return self._task.config.reset_epoch

    def add_external_sink(self, sink: ExternalSink) -> None:
        """Flush ``sink`` at each commit of this node's task, before its offsets are committed."""
        self._task.add_external_sink(sink)

    def current_input(self) -> Any:
        """The input record being processed — a consumed message, the source of a cache entry a flush forwards
        (:class:`RecordSource`), or None in a punctuation — as it is, with no copy: what a node that writes
        later keeps to name the record in :meth:`reject_output`."""
        return self._task.current

    def reject_output(self, destination: str, source: Any, key: bytes | None, value: bytes | None,
                      error: Exception) -> None:
        """An output the destination ``destination`` (outside Kafka) refused goes to ``production.exception.handler``
        (``dead_letter``: to the dead-letter topic with ``error``'s message, ``record=output`` and the input record
        ``source`` — what :meth:`current_input` gave — names); returns when it is skipped, raises ``error`` when the
        handler fails."""
        self._task.reject_output(destination, source, key, value, error)
