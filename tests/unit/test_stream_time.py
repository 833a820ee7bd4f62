"""Stream time across restarts (streaming.runtime.stream_time): the offset metadata's encoding, the stream-time
record, which sub-topologies keep one, and a task that goes on from its committed partition times.

The broker side (the stream-time topic written at each commit and read back after a SIGKILL) is in
tests/integration/test_stream_time_recovery.py; here the commit goes through the real commit path
(``checkpoint.commit``) into a producer that keeps the committed offsets with their metadata.
"""

from __future__ import annotations

import base64
import logging
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, Message, TopicPartition

from streaming import Materialized, Serdes, StreamsBuilder, StreamsConfig, TimeWindows
from streaming.errors import StreamsError
from streaming.naming import is_stream_time_topic, stream_time_topic
from streaming.runtime import checkpoint
from streaming.runtime.stream_time import (
    UNKNOWN,
    StreamTimeRecovery,
    decode_offset_metadata,
    decode_record,
    encode_offset_metadata,
    encode_record,
    stream_time_topics,
    time_at_offsets,
)
from streaming.runtime.task import StreamTask
from streaming.topology.topology import Topology

APP = "st-app"
SIZE, GRACE = 1_000, 500
String = Serdes.String()


class _Producer:
    """Keeps what a commit commits: offsets with their metadata."""

    def __init__(self) -> None:
        self.committed: dict[tuple[str, int], TopicPartition] = {}

    def begin(self) -> None:
        """Nothing to begin."""

    def commit(self, offsets: list[TopicPartition]) -> bool:
        self.committed.update({(tp.topic, tp.partition): tp for tp in offsets})
        return True


class _Collector:
    """Keeps every record sent (changelogs, outputs, stream-time records), per topic."""

    def __init__(self) -> None:
        self.sent: dict[str, list[tuple[bytes | None, bytes | None, int, int]]] = {}
        self.producer = _Producer()

    def send(self, topic: str, key: bytes | None, value: bytes | None, timestamp: int, headers: Any,
             partition: int = -1) -> None:
        self.sent.setdefault(topic, []).append((key, value, timestamp, partition))

    def partition_count(self, topic: str) -> int:
        return 1

    def flush(self) -> None:
        """Nothing outstanding."""


def windowed_count(*topics: str) -> Topology:
    builder = StreamsBuilder()
    (builder.stream(list(topics), key_serde=String, value_serde=String).group_by_key()
     .windowed_by(TimeWindows.of(SIZE, grace=GRACE)).count(Materialized.as_("wcounts"))
     .to_stream().to("out"))
    return builder.build().bind(APP)


def new_task(topology: Topology, state_dir: Path, collector: _Collector, partition: int = 0) -> StreamTask:
    config = StreamsConfig({"application.id": APP, "state.dir": str(state_dir)}, require_bootstrap=False)
    [sub] = topology.subtopologies()
    task = StreamTask(sub, partition, topology, config, collector, lambda: 0)
    task.open_stores()
    task.initialize_topology()
    return task


def message(topic: str, offset: int, timestamp: int, key: str = "k", partition: int = 0) -> Message:
    return Message(topic=topic, partition=partition, offset=offset, key=key.encode(), value=b"v",
                   timestamp=(TIMESTAMP_CREATE_TIME, timestamp))


def committed_of(collector: _Collector) -> Any:
    """A consumer's ``committed``, answering what ``collector``'s producer committed."""
    def committed(partitions: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        known = collector.producer.committed
        return [known.get((tp.topic, tp.partition), TopicPartition(tp.topic, tp.partition)) for tp in partitions]
    return committed


def recovery(collector: _Collector) -> StreamTimeRecovery:
    """A recovery from the committed offsets' metadata only (no sub-topology keeps a stream-time topic)."""
    config = StreamsConfig({"application.id": APP, "bootstrap.servers": "unused:9092"})
    return StreamTimeRecovery(committed_of(collector), config.consumer_config(), {})


# -- encodings ------------------------------------------------------------------------------------------------------
def test_offset_metadata_is_kafka_streams_layout_a_version_byte_and_the_time_in_base64() -> None:
    assert base64.b64decode(encode_offset_metadata(1_700_000_000_123)) == b"\x01" + (1_700_000_000_123).to_bytes(8, "big")
    for time in (0, 1, 10**13, -1):
        assert decode_offset_metadata(encode_offset_metadata(time), "task 0_0 in[0]") == time


def test_offset_metadata_that_is_missing_foreign_or_of_another_version_is_unknown(
        caplog: pytest.LogCaptureFixture) -> None:
    assert decode_offset_metadata(None, "t") == UNKNOWN  # the embedded broker returns none
    assert decode_offset_metadata("", "t") == UNKNOWN
    with caplog.at_level(logging.WARNING):
        assert decode_offset_metadata("hello-123", "task 0_1 orders[1]") == UNKNOWN
        assert decode_offset_metadata(base64.b64encode(b"\x02" + bytes(8)).decode(), "task 0_1 orders[1]") == UNKNOWN
    assert all("task 0_1 orders[1]" in record.getMessage() for record in caplog.records)
    assert "version 2" in caplog.records[1].getMessage()


def test_stream_time_record_round_trips_and_a_bad_one_names_where_it_is() -> None:
    times = {("orders", 3): (1_000, 17), ("payments", 3): (UNKNOWN, 0)}
    assert decode_record(encode_record(times), "x") == times
    with pytest.raises(StreamsError, match=r"app-0-stream-time\[3\] offset 7.*version 9"):
        decode_record(b'{"version":9,"partitions":[]}', "app-0-stream-time[3] offset 7")
    with pytest.raises(StreamsError, match="unreadable"):
        decode_record(b"not json", "here")


def test_only_sub_topologies_with_a_logged_store_keep_a_stream_time_topic() -> None:
    builder = StreamsBuilder()
    builder.stream("a").map_values(str.upper).to("b")  # stateless
    builder.stream("c", key_serde=String, value_serde=String).group_by_key().count(
        Materialized.as_("unlogged").with_logging_disabled())
    builder.stream("d", key_serde=String, value_serde=String).group_by_key().count(Materialized.as_("logged"))
    topology = builder.build().bind(APP)
    by_source = {sub.source_topics: sub.id for sub in topology.subtopologies()}
    assert stream_time_topics(topology, APP) == {by_source[("d",)]: f"{APP}-{by_source[('d',)]}-stream-time"}
    assert is_stream_time_topic(APP, stream_time_topic(APP, 12))
    assert not is_stream_time_topic(APP, f"{APP}-counts-changelog")
    assert not is_stream_time_topic(APP, f"{APP}-x-stream-time")  # a sub-topology is a number


# -- a task across a restart ----------------------------------------------------------------------------------------
def run_and_commit(topology: Topology, state_dir: Path, collector: _Collector, messages: list[Message]) -> StreamTask:
    task = new_task(topology, state_dir, collector)
    task.stream_time_topic = stream_time_topic(APP, 0)
    if task.group is None:
        task.process_messages(messages)
    else:
        for m in messages:
            task.add_messages([m])
        task.process_buffered(len(messages))
    assert checkpoint.commit([task], collector)
    return task


def test_a_commit_records_the_partition_time_in_the_offset_metadata_and_the_stream_time_topic(tmp_path: Path) -> None:
    collector = _Collector()
    task = run_and_commit(windowed_count("in"), tmp_path / "a", collector,
                          [message("in", n, 1_000 + 100 * n) for n in range(20)])
    committed = collector.producer.committed[("in", 0)]
    assert committed.offset == 20 and decode_offset_metadata(committed.metadata, "in[0]") == 2_900
    [(key, value, timestamp, partition)] = collector.sent[stream_time_topic(APP, 0)]
    assert (key, decode_record(value, "x"), timestamp, partition) == (b"0_0", {("in", 0): (2_900, 20)}, 2_900, 0)
    assert checkpoint.commit([task], collector)  # no progress: nothing written again
    assert len(collector.sent[stream_time_topic(APP, 0)]) == 1
    task.close()


def test_a_new_task_goes_on_from_the_committed_stream_time_and_drops_a_late_record_it_reads_first(
        tmp_path: Path) -> None:
    collector = _Collector()
    topology = windowed_count("in")
    run_and_commit(topology, tmp_path / "a", collector, [message("in", n, 1_000 + 100 * n) for n in range(20)]).close()

    restarted = new_task(topology, tmp_path / "b", collector)
    recovery(collector).recover([restarted])  # from the offset metadata alone: the topic is not read here
    assert restarted.stream_time == 2_900
    restarted.process_messages([message("in", 20, 1_200)])  # window [1000, 2000) closed at 2500
    assert restarted.late_records == 1
    restarted.close()

    without = new_task(topology, tmp_path / "c", _Collector())  # what a restart did before: counted
    without.process_messages([message("in", 20, 1_200)])
    assert without.late_records == 0
    without.close()


def test_a_task_of_two_partitions_commits_each_partitions_processed_time_not_what_it_buffered(
        tmp_path: Path) -> None:
    collector = _Collector()
    topology = windowed_count("left", "right")
    task = new_task(topology, tmp_path / "a", collector)
    task.stream_time_topic = stream_time_topic(APP, 0)
    task.add_messages([message("left", n, 1_000 + 100 * n) for n in range(10)])  # up to 1900
    task.add_messages([message("right", n, 5_000 + 100 * n) for n in range(10)])  # up to 5900
    task.process_buffered(12)  # left 1000..1900, then right 5000, 5100
    assert checkpoint.commit([task], collector)
    metadata = {tp: decode_offset_metadata(c.metadata, str(tp)) for tp, c in collector.producer.committed.items()}
    assert metadata == {("left", 0): 1_900, ("right", 0): 5_100}
    assert collector.producer.committed[("right", 0)].offset == 2  # 5200.. are buffered, not processed
    [(_, value, _, _)] = collector.sent[stream_time_topic(APP, 0)]
    assert decode_record(value, "x") == {("left", 0): (1_900, 10), ("right", 0): (5_100, 2)}
    task.close()

    restarted = new_task(topology, tmp_path / "b", collector)
    recovery(collector).recover([restarted])
    assert restarted.stream_time == 5_100
    assert restarted.partition_times() == {("left", 0): 1_900, ("right", 0): 5_100}
    restarted.close()


def test_stream_time_records_past_the_committed_offset_or_of_an_uncommitted_partition_do_not_count() -> None:
    records = [{("a", 0): (100, 10), ("b", 0): (500, 3)}, {("a", 0): (900, 20), ("b", 0): (700, 4)}]
    assert time_at_offsets(records, {("a", 0): 15, ("b", 0): 4}) == {("a", 0): 100, ("b", 0): 700}
    assert time_at_offsets(records, {("a", 0): 5}) == {}  # "b" has no committed offset: replayed from its start
