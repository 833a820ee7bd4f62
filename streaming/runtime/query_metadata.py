"""The ``<application.id>-metadata`` topic: which instances of an application run, and which task each runs.

Kafka Streams learns every instance's ``application.server`` and assignment from its own group
assignor's userdata. librdkafka gives Python no custom assignor and the embedded broker's
DescribeGroups returns no members, so every instance publishes itself: from ``start()`` to ``close()``,
with or without ``application.server``, one record per change of its assignment or state and at least
every ``HEARTBEAT_INTERVAL_S`` (a heartbeat), to this compacted one-partition topic, and a tombstone when
it closes. The key is the instance's ``application.server`` when it has one (what interactive queries
route by), else ``instance-<process id>``. The value is JSON::

    {"version": 1, "host": "10.0.0.5:7070", "instance": "<process id>", "sequence": 12,
     "timestamp": 1700000000000, "state": "RUNNING",
     "active": {"orders": [0, 2]}, "active_tasks": ["0_0", "0_2"], "standby_tasks": ["0_1"],
     "application_server": "10.0.0.5:7070", "hostname": "worker-1", "pid": 4242, "instance_name": "w1"}

``application_server`` is null for an instance without one (``host`` is then its key); ``hostname``,
``pid`` and ``instance_name`` (null when unset) name the process, for the people and tools that must know
who runs (``streaming.runtime.membership``: an application reset refuses while any instance is alive).
Announcements written before these fields existed came only from instances with ``application.server``:
their ``host`` is it. Readers ignore fields they do not know.

Readers follow the topic with one long-lived consumer and keep the latest announcement per key. The
owner of a partition is the host whose latest announcement claims it; when two do (one has not yet
announced its revocation), the announcement later in the topic wins: with one partition, offsets
order all announcements without trusting clocks (``timestamp`` and ``sequence`` are informational).
Interactive queries route only by announcements that have an ``application_server``.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from streaming.admin import TopicError, create_topics
from streaming.errors import StreamsError
from streaming.naming import metadata_topic
from streaming.runtime.client_configs import metadata_publisher_config, metadata_reader_config

log = logging.getLogger(__name__)

ANNOUNCEMENT_VERSION = 1
METADATA_REFRESH_SECONDS = 0.25  # readers catch up with the topic at most this often
CATCH_UP_SLICE_S = 0.002  # a catch-up reads the topic in consume() calls that wait at most this long
REPUBLISH_CHECK_SECONDS = 0.5  # the publisher re-checks the assignment this often, besides on notify()
HEARTBEAT_INTERVAL_S = 10.0  # an instance announces itself at least this often, changed or not
FIRST_ANNOUNCEMENT_TIMEOUT_S = 5.0  # how long KafkaStreams.start() waits for its announcement to be taken


def create_metadata_topic(application_id: str, admin_config: dict[str, str]) -> str:
    """Create (or check) the metadata topic: one partition, compacted (latest announcement per instance)."""
    topic = metadata_topic(application_id)
    try:
        create_topics(admin_config["bootstrap.servers"], {topic: 1},
                      configs={topic: {"cleanup.policy": "compact"}}, client_config=admin_config)
    except TopicError as exc:
        raise StreamsError(f"metadata topic check failed: {exc}. It must have exactly one partition; delete it "
                           f"(it only holds announcements) and restart") from exc
    return topic


@dataclass(frozen=True)
class WorkerIdentity:
    """Who an instance is, as it announces itself: its ``application.server`` (None without one), the machine,
    the process, its ``instance.name`` (None when unset) and its random process id."""

    application_server: str | None
    hostname: str
    pid: int
    instance_name: str | None
    process_id: str

    @property
    def key(self) -> str:
        """The announcement's key: the ``application.server``, else ``instance-<process id>``."""
        return self.application_server or f"instance-{self.process_id}"

    @classmethod
    def of_this_process(cls, application_server: str | None, instance_name: str | None,
                        process_id: str) -> WorkerIdentity:
        """This process (its machine and pid) as an instance with ``application_server`` (None: without one)."""
        return cls(application_server or None, socket.gethostname(), os.getpid(), instance_name or None, process_id)


@dataclass(frozen=True)
class Assignment:
    """What one instance runs: input partitions per source topic, active and standby task ids."""

    active: dict[str, tuple[int, ...]] = field(default_factory=dict)
    active_tasks: tuple[str, ...] = ()
    standby_tasks: tuple[str, ...] = ()


@dataclass(frozen=True)
class HostAnnouncement:
    """The latest record of one instance on the metadata topic (``offset`` orders announcements). ``host`` is the
    record's key: the instance's ``application_server``, or ``instance-<process id>`` without one."""

    host: str
    instance: str
    sequence: int
    timestamp: int
    state: str
    assignment: Assignment
    offset: int
    application_server: str | None = None
    hostname: str | None = None
    pid: int | None = None
    instance_name: str | None = None
    record_timestamp: int = -1
    """The Kafka record's timestamp (the writer's clock, epoch ms; -1 when not read from the topic)."""

    def describe(self) -> str:
        """The instance for people: ``host`` and, when known, the machine, pid and instance name."""
        parts = [f"host {self.hostname}" if self.hostname else "", f"pid {self.pid}" if self.pid else "",
                 f"instance.name {self.instance_name}" if self.instance_name else ""]
        details = ", ".join(part for part in parts if part)
        return f"{self.host} ({details})" if details else self.host

    def owns(self, topics: Iterable[str], partition: int) -> bool:
        active = self.assignment.active
        return any(partition in active.get(topic, ()) for topic in topics)


def encode_announcement(identity: WorkerIdentity, sequence: int, state: str, assignment: Assignment,
                        timestamp: int | None = None) -> bytes:
    return orjson.dumps({
        "version": ANNOUNCEMENT_VERSION, "host": identity.key, "instance": identity.process_id,
        "sequence": sequence, "timestamp": int(time.time() * 1000) if timestamp is None else timestamp,
        "state": state, "active": {topic: list(parts) for topic, parts in sorted(assignment.active.items())},
        "active_tasks": list(assignment.active_tasks), "standby_tasks": list(assignment.standby_tasks),
        "application_server": identity.application_server, "hostname": identity.hostname, "pid": identity.pid,
        "instance_name": identity.instance_name})


def decode_announcement(data: bytes, offset: int, record_timestamp: int = -1) -> HostAnnouncement:
    raw = orjson.loads(data)
    if not isinstance(raw, dict) or raw.get("version") != ANNOUNCEMENT_VERSION:
        raise ValueError(f"not a version-{ANNOUNCEMENT_VERSION} announcement")
    active = {str(topic): tuple(int(p) for p in parts) for topic, parts in raw["active"].items()}
    host = str(raw["host"])
    # Written before every instance announced itself: only instances with application.server did, keyed by it.
    server = raw.get("application_server", host)
    return HostAnnouncement(host, str(raw["instance"]), int(raw["sequence"]), int(raw["timestamp"]),
                            str(raw["state"]), Assignment(active, tuple(raw["active_tasks"]),
                                                          tuple(raw["standby_tasks"])), offset,
                            application_server=None if server is None else str(server),
                            hostname=_optional_str(raw.get("hostname")),
                            pid=None if raw.get("pid") is None else int(raw["pid"]),
                            instance_name=_optional_str(raw.get("instance_name")), record_timestamp=record_timestamp)


def _optional_str(value: Any) -> str | None:
    return None if value is None else str(value)


# -- publishing and reading assignments -------------------------------------------------------------------
class AssignmentPublisher:
    """Announces this instance on the metadata topic: whenever its assignment or state changes, and at least
    every ``heartbeat`` s (so readers can tell a live instance from one that died without its tombstone).

    A daemon thread wakes on :meth:`notify` (a stream thread changed state) and every
    ``REPUBLISH_CHECK_SECONDS`` (changes no state callback reports, such as a task closed just after
    the callback), snapshots the assignment, and produces a record if it differs from the last one or the
    last one is ``heartbeat`` s old. The stream threads never block on it. :meth:`announce` announces at once and
    waits for the broker (the end of ``KafkaStreams.start()``); :meth:`close` writes the tombstone.
    """

    def __init__(self, producer_config: dict[str, str], topic: str, identity: WorkerIdentity,
                 snapshot: Callable[[], tuple[Assignment, str]], heartbeat: float = HEARTBEAT_INTERVAL_S) -> None:
        self._producer = Producer(metadata_publisher_config(producer_config))
        self.topic = topic
        self.identity = identity
        self.host = identity.key
        self.heartbeat = heartbeat
        self._snapshot = snapshot
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._last: tuple[Assignment, str] | None = None
        self._last_sent = float("-inf")  # time.monotonic() of the last announcement
        self.sequence = 0
        self._thread = threading.Thread(target=self._run, name=f"{topic}-publisher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def announce(self, timeout: float = FIRST_ANNOUNCEMENT_TIMEOUT_S) -> None:
        """Announce now (when due: the thread may have done it) and wait, up to ``timeout`` s, for the broker to take
        every announcement sent. ``KafkaStreams.start()`` calls it last, after its stream threads started (their
        group join is not delayed): an instance counts as alive once ``start()`` returned, so a reset or a scaling
        that reads the announcements right after a worker said it started finds it. Not taken in time (a slow
        broker): logged, and the thread goes on announcing."""
        self.publish_if_due()
        if self._producer.flush(timeout) > 0:
            log.warning("the first announcement of %s on %s was not acknowledged within %s s; announcing goes on in "
                        "the background", self.host, self.topic, timeout)

    def notify(self) -> None:
        self._wake.set()

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self.publish_if_due()
                self._producer.poll(0)
            except Exception:
                log.warning("announcing %s on %s failed", self.host, self.topic, exc_info=True)
            self._wake.wait(REPUBLISH_CHECK_SECONDS)
            self._wake.clear()

    def publish_if_due(self) -> bool:
        """Announce when the assignment or state changed, or the last announcement is ``heartbeat`` s old."""
        with self._lock:
            if self._stopping.is_set():
                return False
            current = self._snapshot()
            if current == self._last and time.monotonic() - self._last_sent < self.heartbeat:
                return False
            assignment, state = current
            self.sequence += 1
            value = encode_announcement(self.identity, self.sequence, state, assignment)
            self._producer.produce(self.topic, value, self.host.encode(), partition=0, on_delivery=self._delivered)
            self._last = current
            self._last_sent = time.monotonic()
            log.debug("announced %s: %s (%s)", self.host, assignment, state)
            return True

    def _delivered(self, error: KafkaError | None, message: Any) -> None:
        if error is not None:
            log.warning("announcement of %s on %s not delivered: %s; will retry", self.host, self.topic, error)
            self._last = None  # publish again at the next check

    def close(self, timeout: float = 10.0) -> None:
        """Stop publishing, then write the tombstone (this instance runs nothing and serves nothing any more)."""
        with self._lock:
            self._stopping.set()
        self._wake.set()
        self._thread.join(timeout)
        try:
            self._producer.produce(self.topic, None, self.host.encode(), partition=0)
            if self._producer.flush(timeout) > 0:
                log.warning("the tombstone of %s on %s was not acknowledged within %s s", self.host, self.topic,
                            timeout)
        except Exception:
            log.warning("writing the tombstone of %s on %s failed", self.host, self.topic, exc_info=True)
        try:
            if len(self._producer) > 0:  # unacknowledged (broker unreachable): drop it, close() would wait
                self._producer.purge()
            self._producer.close()  # release the connections now, not when garbage-collected
        except Exception:
            log.debug("closing the metadata producer failed", exc_info=True)


class AssignmentReader:
    """Follows the metadata topic with one long-lived consumer (no group) and keeps the latest
    announcement per host. ``announcements()`` catches up to the end at most every ``refresh`` s.

    "The end" is judged by partition EOF and the high watermark of the fetch responses (cached by
    librdkafka), never by ListOffsets (which the embedded broker answers wrongly).
    """

    def __init__(self, consumer_config: dict[str, str], topic: str, refresh: float = METADATA_REFRESH_SECONDS,
                 timeout: float = 5.0) -> None:
        self._consumer = Consumer(metadata_reader_config(consumer_config, topic))
        self._consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        self.topic = topic
        self._refresh = refresh
        self._timeout = timeout
        self._lock = threading.Lock()
        self._latest: dict[str, HostAnnouncement] = {}
        self._departed: dict[str, int] = {}  # host -> the timestamp (ms) of its tombstone
        self._position = 0
        self._at_end_once = False
        self._refreshed = float("-inf")
        self._closed = False

    def announcements(self) -> dict[str, HostAnnouncement]:
        """The latest announcement of every host that has not written its tombstone."""
        with self._lock:
            if self._closed:
                raise StreamsError("interactive queries: the metadata reader is closed (the instance stopped)")
            if time.monotonic() - self._refreshed >= self._refresh:
                self._catch_up()
                self._refreshed = time.monotonic()
            return dict(self._latest)

    def departures(self) -> dict[str, int]:
        """The hosts that wrote a tombstone (left), each with its tombstone's timestamp in ms; read as
        :meth:`announcements` reads (call that first to catch up)."""
        with self._lock:
            return dict(self._departed)

    def _catch_up(self) -> None:
        deadline = time.monotonic() + self._timeout
        partition = TopicPartition(self.topic, 0)
        # consume(n, wait) waits the whole wait unless n arrive: short slices (a stopping thread asks this before it
        # leaves, so a close pays the last slice; 10 ms slices cost it ~10 ms)
        wait = 0.0 if self._at_end_once else CATCH_UP_SLICE_S
        while True:
            for message in self._consumer.consume(1000, wait):
                self._apply(message)
            if self._at_end_once:
                high = self._consumer.get_watermark_offsets(partition, cached=True)[1]
                if high < 0 or self._position >= high:
                    return
            if time.monotonic() > deadline:
                raise StreamsError(f"interactive queries: cannot read the metadata topic {self.topic!r} to its end "
                                   f"within {self._timeout} s (at offset {self._position})")
            wait = CATCH_UP_SLICE_S

    def _apply(self, message: Any) -> None:
        error = message.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                self._at_end_once = True
                self._position = max(self._position, message.offset())
            elif error.fatal():
                raise KafkaException(error)
            else:
                log.warning("interactive queries: reading %s: %s", self.topic, error)
            return
        self._position = message.offset() + 1
        host = message.key().decode() if message.key() is not None else None
        if host is None:
            return
        if message.value() is None:
            self._latest.pop(host, None)
            self._departed[host] = message.timestamp()[1]
            return
        self._departed.pop(host, None)
        try:
            self._latest[host] = decode_announcement(message.value(), message.offset(), message.timestamp()[1])
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("interactive queries: skipping an unreadable announcement at %s[0]@%d: %s",
                        self.topic, message.offset(), exc)

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._consumer.close()
