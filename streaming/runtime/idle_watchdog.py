"""The idle watchdog: ``processing.idle.timeout.ms`` (0: off) reports a source topic that stopped receiving records.

A stream thread watches the partitions of the source topics ``processing.idle.topics`` names (default: every
external source topic, not its repartition topics; a table's topic is quiet by nature, so name the streams) that it
has running tasks for. A partition shows activity when its high watermark (from the last fetch
response) or the task's next offset to commit moved since the last check; the thread checks about once a
second (:meth:`IdleWatchdog.check`), so nothing runs per record. When none of a topic's watched partitions
showed activity for the timeout (counted from the last activity, or from when the thread started watching the
topic), the topic is idle: the thread writes an ``idle`` alert to ``<application.id>-alerts`` and sets
``brook_source_idle{topic}`` to 1. The first activity after that writes a ``resumed`` alert and sets the gauge
back to 0. ``brook_source_idle_seconds{topic}`` is the time since the topic's last activity.

An alert is a JSON record keyed by the topic name, timestamped when it was raised (see :func:`alert_value`)::

    {"application_id": "orders-app", "topic": "orders", "partitions": [0, 1], "state": "idle",
     "idle_ms": 30004, "timeout_ms": 30000, "thread": "orders-app-StreamThread-1", "at_ms": 1764150000000,
     "last_seen": {"0": {"offset": 41, "timestamp": 1764149969000}, "1": {"offset": -1, "timestamp": -1}}}

``last_seen`` is per partition the last offset the task processed and the highest record timestamp it
processed (-1: none since the task started). Each stream thread watches its own partitions: with
``num.stream.threads`` > 1 one topic may be reported by several threads, each naming its partitions. The
alert goes through the record collector (under exactly-once, in the thread's open transaction).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from streaming.errors import ConfigError
from streaming.metrics.collector import IdleSample

log = logging.getLogger(__name__)

IDLE = "idle"
RESUMED = "resumed"

TopicPartition = tuple[str, int]
Send = Callable[[str, bytes | None, bytes | None, int, Any, int], None]


class _Task(Protocol):
    """What the watchdog needs of a :class:`~streaming.runtime.task.StreamTask`."""

    initialized: bool
    consumed: dict[TopicPartition, int]

    def partition_times(self) -> dict[TopicPartition, int]: ...


@dataclass
class _Watch:
    """A watched topic: its partitions' last progress marks, when it last showed activity, whether it is idle."""

    last_activity_ms: int
    marks: dict[int, tuple[int | None, int | None]] = field(default_factory=dict)
    last_seen: dict[int, tuple[int, int]] = field(default_factory=dict)  # partition -> (offset, timestamp)
    idle: bool = False


def alert_value(application_id: str, thread: str, topic: str, watch: _Watch, state: str, idle_ms: int,
                timeout_ms: int, now_ms: int) -> bytes:
    """The JSON value of an alert (see the module doc)."""
    return json.dumps({
        "application_id": application_id, "topic": topic, "partitions": sorted(watch.marks), "state": state,
        "idle_ms": idle_ms, "timeout_ms": timeout_ms, "thread": thread, "at_ms": now_ms,
        "last_seen": {str(p): {"offset": watch.last_seen.get(p, (-1, -1))[0],
                               "timestamp": watch.last_seen.get(p, (-1, -1))[1]} for p in sorted(watch.marks)},
    }).encode()


def watched_topics(config: Any, topology: Any) -> set[str]:
    """The topics ``processing.idle.topics`` names (default: every source topic the app does not own). Raises
    :class:`~streaming.errors.ConfigError` naming a topic the topology does not read."""
    sources = set(topology.source_topics) - set(topology.internal_topics)
    named = [topic.strip() for topic in config["processing.idle.topics"].split(",") if topic.strip()]
    unknown = sorted(set(named) - sources)
    if unknown:
        raise ConfigError(f"config key 'processing.idle.topics' names {', '.join(map(repr, unknown))}, which the "
                          f"topology does not read (its source topics: {', '.join(sorted(sources))})")
    return set(named) or sources


class IdleWatchdog:
    """Watches one stream thread's source partitions of ``topics`` (see the module doc); alerts go to
    ``alerts_topic`` through ``send``."""

    def __init__(self, application_id: str, thread: str, timeout_ms: int, topics: set[str], send: Send,
                 alerts_topic: str) -> None:
        self._application_id = application_id
        self._thread = thread
        self.timeout_ms = timeout_ms
        self._topics = topics
        self._send = send
        self._alerts_topic = alerts_topic
        self._watches: dict[str, _Watch] = {}
        self._now_ms = 0

    def check(self, now_ms: int, task_of: dict[TopicPartition, _Task],
              end_offset: Callable[[TopicPartition], int | None]) -> None:
        """Look for activity on the watched partitions (those of ``topics`` with a running task in ``task_of``;
        ``end_offset(tp)``: the high watermark of the last fetch, None if unknown) and alert on changes."""
        self._now_ms = now_ms
        running: dict[str, dict[int, _Task]] = {}
        for tp, task in task_of.items():
            if tp[0] in self._topics and task.initialized:
                running.setdefault(tp[0], {})[tp[1]] = task
        for topic in [t for t in self._watches if t not in running]:
            del self._watches[topic]  # no longer this thread's to watch
        for topic, tasks in running.items():
            watch = self._watches.get(topic)
            if watch is None:
                watch = self._watches[topic] = _Watch(last_activity_ms=now_ms)
            active = False
            for partition in [p for p in watch.marks if p not in tasks]:
                del watch.marks[partition]
            for partition, task in tasks.items():
                tp = (topic, partition)
                mark = (task.consumed.get(tp), end_offset(tp))
                previous = watch.marks.get(partition)
                watch.marks[partition] = mark
                if previous is not None and mark != previous:
                    active = True
                consumed = mark[0]
                if consumed is not None:
                    watch.last_seen[partition] = (consumed - 1, task.partition_times().get(tp, -1))
            self._update(topic, watch, active, now_ms)

    def _update(self, topic: str, watch: _Watch, active: bool, now_ms: int) -> None:
        idle_ms = now_ms - watch.last_activity_ms
        if active:
            if watch.idle:
                watch.idle = False
                log.info("source topic %s resumed after %.1f s without records (partitions %s)", topic,
                         idle_ms / 1000, sorted(watch.marks))
                self._alert(topic, watch, RESUMED, idle_ms, now_ms)
            watch.last_activity_ms = now_ms
        elif not watch.idle and idle_ms >= self.timeout_ms:
            watch.idle = True
            log.warning("source topic %s is idle: no record for %.1f s on partitions %s "
                        "(processing.idle.timeout.ms=%d); alert written to %s", topic, idle_ms / 1000,
                        sorted(watch.marks), self.timeout_ms, self._alerts_topic)
            self._alert(topic, watch, IDLE, idle_ms, now_ms)

    def _alert(self, topic: str, watch: _Watch, state: str, idle_ms: int, now_ms: int) -> None:
        value = alert_value(self._application_id, self._thread, topic, watch, state, idle_ms, self.timeout_ms,
                            now_ms)
        self._send(self._alerts_topic, topic.encode(), value, now_ms, None, 0)

    def samples(self) -> list[IdleSample]:
        """The watched topics as of the last check (called from the scraping thread: copies only)."""
        return [IdleSample(topic, watch.idle, max(self._now_ms - watch.last_activity_ms, 0) / 1000)
                for topic, watch in sorted(self._watches.items())]
