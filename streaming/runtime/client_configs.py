"""The librdkafka settings of every client the runtime creates, derived in one place.

Each client starts from the :class:`~streaming.config.StreamsConfig` settings of its kind
(``consumer_config()``, ``producer_config()``, ``admin_config()``), which carry the security settings
(:meth:`~streaming.config.StreamsConfig.client_security`): given once, they reach the main consumer,
the producer, the admin client, the restore consumer, the global consumer, and the interactive-query
metadata reader and publisher. The functions here only take away what a client must not have (group
settings of a consumer that never joins a group) and add what its job needs; security passes through.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Settings of a group member: a consumer that only assign()s must not carry them.
GROUP_MEMBER_KEYS = ("group.id", "partition.assignment.strategy", "session.timeout.ms", "heartbeat.interval.ms",
                     "group.instance.id", "enable.auto.offset.store")
#: The restore consumer's longest fetch wait (see :func:`restore_consumer_config`).
RESTORE_FETCH_WAIT_MS = 20
#: A reader whose partition gets neither a record nor partition EOF this long is starved by its fetch wait
#: (see :func:`starved_reader_config`).
STARVED_AFTER_S = 2.0
#: The fetch wait a starved reader is given instead: librdkafka's default.
STARVED_FETCH_WAIT_MS = 500


def _without_group(consumer_config: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in consumer_config.items() if key not in GROUP_MEMBER_KEYS}


def restore_consumer_config(consumer_config: Mapping[str, Any]) -> dict[str, Any]:
    """The restore consumer (changelogs and standbys, by assign()): group ``<application.id>-restore``.

    A short fetch wait (at most RESTORE_FETCH_WAIT_MS, whatever the main consumer's): the empty fetch at the end
    of a partition must not hold a restore for librdkafka's default 500 ms (measured: restore at 18k records/s
    with it, 490k/s with 20 ms). Fetch and queue sizes stay librdkafka's: on bench/restore.py, larger fetches
    (``fetch.max.bytes`` 100 MB, ``max.partition.fetch.bytes`` 10 MB) restored 10-15% slower, a larger
    ``queued.min.messages`` slower with twice the RSS, a 5 ms fetch wait 15-25% slower; smaller queues
    (``queued.max.messages.kbytes`` 4-16 MB) and ``fetch.queue.backoff.ms=1`` gained nothing.
    ``auto.offset.reset=error``: a restore offset the changelog no longer has (truncated, or the topic
    recreated under older local state) fails loudly instead of silently skipping to an end.
    """
    fetch_wait = min(int(consumer_config.get("fetch.wait.max.ms", RESTORE_FETCH_WAIT_MS)), RESTORE_FETCH_WAIT_MS)
    return {**_without_group(consumer_config), "fetch.wait.max.ms": str(fetch_wait), "enable.auto.commit": "false",
            "enable.partition.eof": "true", "auto.offset.reset": "error",
            "group.id": f"{consumer_config['group.id']}-restore"}


def starved_reader_config(reader_config: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of a reader (the restore consumer, the stream-time reader) that got neither records nor
    partition EOF from one of its partitions for :data:`STARVED_AFTER_S`: the same, with a fetch wait of at
    least :data:`STARVED_FETCH_WAIT_MS`.

    The embedded broker on S3 storage gives a fetch ``fetch.wait.max.ms`` of its time, and lists the partition's
    objects (one per record batch) at each fetch; under load the listing outlasts the readers' 20 ms and the fetch
    comes back with nothing, every time (docs/broker-limits.md, "fetch time budget"). Measured with a plain
    consumer reading 30 one-record batches (a stream-time partition) from S3 storage shared with 4 tail-following
    consumers and a producer: 0 or 1 of the 30 in 300 s with a 20 ms wait (3 tries), all in 22-50 s with 200 ms,
    in 9 s with 500 ms; in 0.2-0.9 s with any wait when nothing else used the broker. Kafka answers a fetch at
    once when it has records to give, and with partition EOF within the wait when it has none (so does the
    embedded broker's memory storage, but past a partition's end, which a restore checks for itself): a reader
    that gets neither for seconds is starved (or the broker is down, when the wait does not matter), and only then
    pays the longer wait, at each partition EOF."""
    wait = max(int(reader_config.get("fetch.wait.max.ms", 0)), STARVED_FETCH_WAIT_MS)
    return {**reader_config, "fetch.wait.max.ms": str(wait)}


def stream_time_reader_config(consumer_config: Mapping[str, Any]) -> dict[str, Any]:
    """The reader of the stream-time topics (by assign(), a partition's tail to partition EOF, when tasks are
    created): the restore consumer's settings, starting at the earliest offset where a start is gone. Its
    ``client.id`` (the user's, or the application id, with ``-stream-time-reader``) tells its requests apart in
    the broker's logs and quotas, as Kafka Streams names each client of a thread."""
    prefix = consumer_config.get("client.id") or consumer_config["group.id"]
    return {**restore_consumer_config(consumer_config), "auto.offset.reset": "earliest",
            "group.id": f"{consumer_config['group.id']}-stream-time", "client.id": f"{prefix}-stream-time-reader"}


def global_consumer_config(consumer_config: Mapping[str, Any], application_id: str) -> dict[str, Any]:
    """The global consumer (every partition of the global topics, by assign(), nothing committed)."""
    return {**_without_group(consumer_config), "group.id": f"{application_id}-global",
            "enable.auto.commit": "false", "enable.partition.eof": "true", "auto.offset.reset": "earliest"}


def metadata_reader_config(consumer_config: Mapping[str, Any], topic: str) -> dict[str, Any]:
    """The reader of the interactive-query metadata topic ``topic`` (by assign())."""
    return {**_without_group(consumer_config), "group.id": f"{topic}-reader", "enable.auto.commit": "false",
            "enable.partition.eof": "true", "fetch.wait.max.ms": "100"}


def metadata_publisher_config(producer_config: Mapping[str, Any]) -> dict[str, Any]:
    """The producer announcing this instance's assignment: never transactional, sent at once."""
    return {**{key: value for key, value in producer_config.items() if not key.startswith("transactional.")},
            "linger.ms": "0"}
