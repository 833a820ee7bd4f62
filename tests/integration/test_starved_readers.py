"""Readers that the broker starves: a new task's stream-time read and its restore get through a broker that answers
their short fetches with nothing.

The embedded broker on S3 storage gives a fetch ``fetch.wait.max.ms`` of its time and lists the partition's objects
(one per record batch) at each fetch; a listing slower than that leaves the fetch with neither records nor partition
EOF (docs/broker-limits.md, "fetch time budget"). The stream-time reader and the restore consumer fetch with a 20 ms
wait, so after the broker bounce of tests/integration/test_broker_bounce.py, which makes every task new, the tasks
waited minutes for their stream time and their restore on a loaded machine. Here a proxy in front of the S3 server
answers every listing :data:`LIST_DELAY_S` late, so a 20 ms fetch never brings anything (the first test shows it with
a plain consumer); the readers go on with a longer wait once starved
(:func:`streaming.runtime.client_configs.starved_reader_config`).
"""

from __future__ import annotations

import http.client
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from streaming.admin import create_topics
from streaming.broker import EmbeddedBroker
from streaming.runtime.changelog_reader import StoreChangelogReader
from streaming.runtime.stream_time import StreamTimeRecovery, encode_record
from streaming.runtime.task_timeouts import TaskTimeouts
from streaming.testing.s3 import S3Server, S3ServerError
from tests.integration.task_stand_ins import RecoveringTask

pytestmark = pytest.mark.integration
BUCKET = "brook-broker"
LIST_DELAY_S = 0.1  # longer than the readers' 20 ms fetch wait, shorter than the 500 ms of a starved reader
RECORDS = 10  # one batch each, as a task's stream-time records and its changelog writes at each commit are
TASK_TIMEOUT_MS = 30_000  # a task that gets nothing this long fails (task.timeout.ms)
WIDENED = "goes on with fetch.wait.max.ms=500"


class _SlowListings(BaseHTTPRequestHandler):
    """Forwards each request to the S3 server; a listing (``GET ?list-type=2``) is answered LIST_DELAY_S late."""

    protocol_version = "HTTP/1.1"
    server: _Proxy

    def _forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        if self.command == "GET" and "list-type=" in self.path:
            time.sleep(LIST_DELAY_S)
        upstream = http.client.HTTPConnection(self.server.upstream, timeout=30)
        try:
            upstream.request(self.command, self.path, body=body,
                             headers={k: v for k, v in self.headers.items() if k.lower() != "connection"})
            response = upstream.getresponse()
            data = response.read()
        finally:
            upstream.close()
        self.send_response(response.status, response.reason)
        for key, value in response.getheaders():
            if key.lower() not in ("connection", "transfer-encoding", "content-length", "date", "server"):
                self.send_header(key, value)
        self.send_header("Content-Length", response.getheader("Content-Length", "0") if self.command == "HEAD"
                         else str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the S3 server logs every request."""


class _Proxy(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream: str) -> None:
        super().__init__(("127.0.0.1", 0), _SlowListings)
        self.upstream = upstream

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Quiet: the broker closes connections it gave up on (a fetch past its wait)."""


@pytest.fixture(scope="module")
def slow_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An embedded broker on S3 storage whose object listings come LIST_DELAY_S late; yields its bootstrap."""
    tmp_path = tmp_path_factory.mktemp("slow-broker")
    s3 = S3Server(tmp_path / "s3")
    try:
        s3.start()
        s3.create_bucket(BUCKET)
    except S3ServerError as exc:
        s3.stop()
        pytest.skip(f"no local S3 server for the broker's storage: {exc}")
    proxy = _Proxy(urlsplit(s3.endpoint).netloc)
    threading.Thread(target=proxy.serve_forever, name="slow-listings", daemon=True).start()
    env = {**s3.broker_env(), "AWS_ENDPOINT": f"http://127.0.0.1:{proxy.server_address[1]}"}
    broker = EmbeddedBroker(workdir=tmp_path / "broker", storage_engine=f"s3://{BUCKET}/", env=env)
    try:
        broker.start()
        yield broker.bootstrap_servers
    finally:
        broker.stop()
        proxy.shutdown()
        proxy.server_close()
        s3.stop()


def write_batches(bootstrap: str, topic: str, values: list[bytes], key: bytes) -> None:
    """One record per batch (flushed each), at offsets 0, 1, ..."""
    create_topics(bootstrap, {topic: 1})
    producer = Producer({"bootstrap.servers": bootstrap})
    for value in values:
        producer.produce(topic, value, key, partition=0)
        assert producer.flush(30) == 0


@dataclass
class _Store:
    """A store as the changelog reader restores it: what it was given, in order."""

    name: str = "counts"
    timestamped: bool = False
    restored: list[tuple[bytes, bytes]] = field(default_factory=list)

    def restore_batch(self, batch: list[tuple[bytes, bytes]]) -> None:
        self.restored.extend(batch)


@pytest.mark.parametrize(("wait_ms", "records"), [(20, 0), (500, RECORDS)])
def test_the_broker_answers_a_fetch_whose_listing_outlasts_its_wait_with_nothing(
        slow_broker: str, unique_name: str, wait_ms: int, records: int) -> None:
    """The broker's limit itself, with a plain consumer: with a 20 ms wait it gets neither records nor partition EOF
    (however often it asks), with 500 ms it reads the partition to its end."""
    topic = f"{unique_name}-batches"
    write_batches(slow_broker, topic, [str(n).encode() for n in range(RECORDS)], b"k")
    consumer = Consumer({"bootstrap.servers": slow_broker, "group.id": unique_name, "enable.partition.eof": True,
                         "fetch.wait.max.ms": wait_ms})
    read, end = 0, None
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 5
        while end is None and time.monotonic() < deadline:
            for message in consumer.consume(100, 0.2):
                if message.error() is None:
                    read += 1
                elif message.error().code() == KafkaError._PARTITION_EOF:
                    end = message.offset()
    finally:
        consumer.close()
    assert (read, end) == (records, RECORDS if records else None)


def test_a_new_tasks_stream_time_read_gets_through_a_broker_that_starves_short_fetches(
        slow_broker: str, unique_name: str, caplog: pytest.LogCaptureFixture) -> None:
    topic, source = f"{unique_name}-0-stream-time", f"{unique_name}-in"
    write_batches(slow_broker, topic, [encode_record({(source, 0): (1_000 * n, 10 * n)}) for n in range(RECORDS)],
                  b"0_0")

    def committed_offsets(partitions: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        return [TopicPartition(source, 0, 10 * (RECORDS - 1))]

    task = RecoveringTask("0_0", 0, [(source, 0)])
    started = time.monotonic()
    with caplog.at_level(logging.INFO, logger="streaming.runtime.stream_time"):
        StreamTimeRecovery(committed_offsets, {"bootstrap.servers": slow_broker, "group.id": unique_name}, {0: topic},
                           timeouts=TaskTimeouts(TASK_TIMEOUT_MS)).recover([task])
    assert task.times == {(source, 0): 1_000 * (RECORDS - 1)}
    assert any(WIDENED in record.getMessage() for record in caplog.records)
    print(f"stream time of {RECORDS} one-record batches read in {time.monotonic() - started:.1f} s")


def test_a_restore_gets_through_a_broker_that_starves_short_fetches(
        slow_broker: str, unique_name: str, caplog: pytest.LogCaptureFixture) -> None:
    topic = f"{unique_name}-counts-changelog"
    write_batches(slow_broker, topic, [str(n).encode() for n in range(RECORDS)], b"k")
    reader = StoreChangelogReader({"bootstrap.servers": slow_broker, "group.id": unique_name}, None,
                                  timeouts=TaskTimeouts(TASK_TIMEOUT_MS))
    task, store = RecoveringTask("0_0", 0, []), _Store()
    started = time.monotonic()
    try:
        with caplog.at_level(logging.INFO, logger="streaming.runtime.changelog_reader"):
            reader.register(task, {(topic, 0): 0}, {(topic, 0): store})
            while not reader.restore(1_000, 0.1):
                assert time.monotonic() - started < 60, f"restored {len(store.restored)} of {RECORDS} records in 60 s"
    finally:
        reader.close()
    assert store.restored[-1] == (b"k", str(RECORDS - 1).encode())
    assert reader.restored[("counts", topic, 0)] == RECORDS
    assert any(WIDENED in record.getMessage() for record in caplog.records)
    print(f"{RECORDS} one-record batches restored in {time.monotonic() - started:.1f} s")


def test_a_changelogs_end_offset_gets_through_a_broker_that_starves_short_fetches(
        slow_broker: str, unique_name: str, caplog: pytest.LogCaptureFixture) -> None:
    """The end-offsets reader fetches with a 5 ms wait (a close pays ~10 ms for it); starved, it goes on with the
    longer wait, and so does its next call."""
    topic = f"{unique_name}-counts-changelog"
    write_batches(slow_broker, topic, [str(n).encode() for n in range(RECORDS)], b"k")
    reader = StoreChangelogReader({"bootstrap.servers": slow_broker, "group.id": unique_name}, None,
                                  timeouts=TaskTimeouts(TASK_TIMEOUT_MS))
    try:
        with caplog.at_level(logging.INFO, logger="streaming.runtime.changelog_reader"):
            started = time.monotonic()
            assert reader.end_offsets([(topic, 0)], timeout=60) == {(topic, 0): RECORDS}
            first = time.monotonic() - started
            started = time.monotonic()
            assert reader.end_offsets([(topic, 0)], timeout=60) == {(topic, 0): RECORDS}
            second = time.monotonic() - started
    finally:
        reader.close()
    widened = [record for record in caplog.records if "end-offsets reader got no partition EOF" in record.getMessage()]
    assert len(widened) == 1, "the first call widens the wait once; the second starts with the longer wait"
    print(f"end offset read in {first:.1f} s (starved, then widened), then in {second:.1f} s")
