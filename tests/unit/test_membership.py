"""Who is running, without a broker: when an announced instance counts as alive, how it is named, and that an
instance announces itself again at least every heartbeat even when nothing changed (issue 17, item 1)."""

from __future__ import annotations

import time

from streaming.runtime.membership import STALE_AFTER_S, LiveWorker, announced_alive
from streaming.runtime.query_metadata import (
    HEARTBEAT_INTERVAL_S,
    Assignment,
    AssignmentPublisher,
    HostAnnouncement,
    WorkerIdentity,
)

NOW = 1_700_000_000_000


def announced(key: str, seen_ms_ago: int, *, server: str | None = None) -> HostAnnouncement:
    return HostAnnouncement(key, "p", 1, 0, "RUNNING", Assignment(), 0, application_server=server,
                            hostname="box", pid=7, record_timestamp=NOW - seen_ms_ago)


def test_the_bound_is_three_heartbeats_and_thirty_seconds() -> None:
    assert (HEARTBEAT_INTERVAL_S, STALE_AFTER_S) == (10, 60)


def test_an_instance_counts_as_alive_until_the_bound_after_it_was_last_seen() -> None:
    bound_ms = int(STALE_AFTER_S * 1000)
    latest = {"a": announced("a", 12_000), "b": announced("b", bound_ms - 1), "c": announced("c", bound_ms),
              "d": announced("d", -5_000)}  # d's clock is 5 s ahead of ours
    alive = announced_alive(latest, NOW)
    assert [worker.name for worker in alive] == ["a (host box, pid 7)", "b (host box, pid 7)", "d (host box, pid 7)"]
    assert alive[0] == LiveWorker("a (host box, pid 7)", 12.0, STALE_AFTER_S - 12.0)
    assert alive[2].last_seen_s == 0.0 and alive[2].stopped_in_s == STALE_AFTER_S
    assert alive[0].describe() == "a (host box, pid 7) (last seen 12 s ago; if it was killed, it counts as stopped in 48 s)"
    assert announced_alive(latest, NOW, stale_after_s=5) == [LiveWorker("d (host box, pid 7)", 0.0, 5.0)]
    assert LiveWorker("group member rdkafka@10.0.0.5 (m-1)").describe() == \
        "group member rdkafka@10.0.0.5 (m-1) (a member of the consumer group)"


def test_the_publisher_announces_on_change_and_at_least_every_heartbeat() -> None:
    state = ["RUNNING"]
    publisher = AssignmentPublisher({"bootstrap.servers": "127.0.0.1:1", "log_level": 0}, "app-metadata",
                                    WorkerIdentity(None, "box", 7, None, "abc"),
                                    lambda: (Assignment(), state[0]), heartbeat=0.2)
    assert publisher.host == "instance-abc"
    assert publisher.publish_if_due()  # the first announcement
    assert not publisher.publish_if_due()  # nothing changed, heartbeat not due
    state[0] = "REBALANCING"
    assert publisher.publish_if_due()  # a change
    time.sleep(0.25)
    assert publisher.publish_if_due()  # unchanged, but the heartbeat is due
    assert publisher.sequence == 3
