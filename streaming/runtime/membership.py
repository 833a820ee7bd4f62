"""Who is running: the live instances of an application, for the operations that must not run beside them.

An application reset (and partition scaling) rewrites what running instances read and write, so it refuses
while any instance of the application is alive. Kafka's own tools ask the group (``DescribeGroups``) for its
members; the embedded broker lists none, and a member that is still restoring or between two rebalances is
easy to miss, so Brook also asks the instances themselves: every :class:`~streaming.runtime.kafka_streams.
KafkaStreams` announces itself on ``<application.id>-metadata`` from ``start()`` to ``close()``, at least every
``HEARTBEAT_INTERVAL_S`` (10 s), and writes a tombstone when it closes
(:mod:`streaming.runtime.query_metadata`). An instance counts as alive when

- its latest announcement is not a tombstone and is younger than ``STALE_AFTER_S`` (3 heartbeats + 30 s = 60 s),
  measured by this machine's clock against the announcement record's timestamp (the writer's clock), or
- the broker lists members of the group ``application.id`` (Apache Kafka does; the embedded broker does not).

So an instance that was SIGKILLed (no tombstone) counts as alive for up to 60 s after it was last seen, then as
stopped; the refusal says how long that is. The clock assumption: the machines' clocks agree within 30 s (an
announcement is at most ~10 s old while its instance runs, so a clock up to ~50 s behind still reads as alive;
keep clocks in sync with NTP). A clock ahead only makes an instance look alive longer.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from streaming.admin import partition_counts, read_to_end
from streaming.errors import StreamsError
from streaming.naming import metadata_topic
from streaming.runtime.query_metadata import HEARTBEAT_INTERVAL_S, HostAnnouncement, decode_announcement

__all__ = ["STALE_AFTER_S", "LiveWorker", "LiveWorkersError", "announced_alive", "group_members", "live_workers",
           "read_announcements", "refuse_while_alive"]

#: How long after its last announcement an instance without a tombstone still counts as alive.
STALE_AFTER_S = 3 * HEARTBEAT_INTERVAL_S + 30


class LiveWorkersError(StreamsError):
    """An operation that needs every instance of an application stopped found live ones (names them)."""


@dataclass(frozen=True)
class LiveWorker:
    """One live instance: ``name`` says which (key, machine, pid; or the group member), ``last_seen_s`` how old its
    latest announcement is (None for a group member), ``stopped_in_s`` when it will count as stopped if it says
    nothing more (None: while the group lists it)."""

    name: str
    last_seen_s: float | None = None
    stopped_in_s: float | None = None

    def describe(self) -> str:
        """The worker and how long ago it was last seen, for the refusal."""
        if self.last_seen_s is None:
            return f"{self.name} (a member of the consumer group)"
        return (f"{self.name} (last seen {self.last_seen_s:.0f} s ago; if it was killed, it counts as stopped in "
                f"{max(self.stopped_in_s or 0.0, 0.0):.0f} s)")


def read_announcements(client_config: Mapping[str, Any], application_id: str,
                       timeout: float = 30.0) -> dict[str, HostAnnouncement]:
    """The latest announcement of every instance of ``application_id`` that has not written its tombstone, read
    from ``<application.id>-metadata`` to its end (partition EOF; empty when the topic does not exist)."""
    topic = metadata_topic(application_id)
    if partition_counts(client_config["bootstrap.servers"], [topic], client_config)[topic] is None:
        return {}
    latest: dict[str, HostAnnouncement] = {}
    for message in read_to_end(client_config, [(topic, 0, OFFSET_BEGINNING)], timeout=timeout):
        key = message.key()
        if key is None:
            continue
        if message.value() is None:
            latest.pop(key.decode(), None)
            continue
        try:
            latest[key.decode()] = decode_announcement(message.value(), message.offset(), message.timestamp()[1])
        except (ValueError, KeyError, TypeError):
            continue  # not an announcement this version reads: it names no instance we could stop
    return latest


def group_members(client_config: Mapping[str, Any], group: str, timeout: float = 10.0) -> list[str]:
    """The members the broker lists for consumer group ``group`` (``client id @ host``); none for a group that
    does not exist. Raises :class:`StreamsError` naming the group when the broker cannot say."""
    admin = AdminClient(dict(client_config))
    try:
        description = admin.describe_consumer_groups([group], request_timeout=timeout)[group].result(timeout)
    except KafkaException as exc:
        error: KafkaError = exc.args[0]
        if error.code() == KafkaError.GROUP_ID_NOT_FOUND:
            return []
        raise StreamsError(f"cannot describe consumer group {group!r}: {error.name()}: {error.str()}") from None
    return [f"group member {m.client_id}@{m.host.lstrip('/')} ({m.member_id})" for m in description.members]


def announced_alive(announcements: Mapping[str, HostAnnouncement], now_ms: int,
                    stale_after_s: float = STALE_AFTER_S) -> list[LiveWorker]:
    """The announced instances that count as alive at ``now_ms``: latest announcement (tombstoned ones are not
    in ``announcements``) younger than ``stale_after_s``; one from a clock ahead of ours is as fresh as now."""
    workers = []
    for announcement in sorted(announcements.values(), key=lambda a: a.host):
        age_s = (now_ms - announcement.record_timestamp) / 1000
        if age_s < stale_after_s:
            workers.append(LiveWorker(announcement.describe(), max(age_s, 0.0), stale_after_s - max(age_s, 0.0)))
    return workers


def live_workers(client_config: Mapping[str, Any], application_id: str, *, now_ms: int | None = None,
                 stale_after_s: float = STALE_AFTER_S) -> list[LiveWorker]:
    """Every live instance of ``application_id``: announcements younger than ``stale_after_s`` without a
    tombstone, then the group's members (module doc)."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    workers = announced_alive(read_announcements(client_config, application_id), now, stale_after_s)
    workers.extend(LiveWorker(member) for member in group_members(client_config, application_id))
    return workers


def refuse_while_alive(client_config: Mapping[str, Any], application_id: str, action: str, *,
                       stale_after_s: float = STALE_AFTER_S) -> None:
    """Raise :class:`LiveWorkersError` (one line naming every live instance) unless every instance of
    ``application_id`` is stopped; ``action`` names what is refused, e.g. ``"reset application 'orders'"``."""
    workers = live_workers(client_config, application_id, stale_after_s=stale_after_s)
    if workers:
        raise LiveWorkersError(
            f"cannot {action}: {len(workers)} instance(s) of application {application_id!r} are alive: "
            f"{'; '.join(worker.describe() for worker in workers)}. Stop every worker first (brook status "
            f"{application_id} lists them)")
