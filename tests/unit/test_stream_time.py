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
from confluent_kafka import TIMESTAMP_CREATE_TIME, Message, Producer, TopicPartition

from streaming import Materialized, Serdes, StreamsBuilder, StreamsConfig, TimeWindows
from streaming.admin import create_topics
from streaming.errors import StreamsError
from streaming.naming import is_stream_time_topic, stream_time_topic
from streaming.runtime import checkpoint
from streaming.runtime.stream_time import (
    UNKNOWN,
    StreamTimeRecord,
    StreamTimeRecovery,
    decode_offset_metadata,
    decode_record,
    encode_offset_metadata,
    encode_record,
    observed_at_offsets,
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
             partition: int = -1, source: Any = None, task_id: Any = None) -> None:
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
        assert decode_offset_metadata(encode_offset_metadata(time), "task 0_0 in[0]") == (time, {})


def test_offset_metadata_with_node_times_is_kafka_streams_version_2_with_its_processor_metadata() -> None:
    # TopicPartitionMetadata.encode: magic 2, the partition time, then ProcessorMetadata.serialize: an int count,
    # per entry an int key length, the UTF-8 key, a long value
    raw = base64.b64decode(encode_offset_metadata(7, {"b": 300, "ä": -1}))
    assert raw == (b"\x02" + (7).to_bytes(8, "big") + (2).to_bytes(4, "big")
                   + (1).to_bytes(4, "big") + b"b" + (300).to_bytes(8, "big")
                   + (2).to_bytes(4, "big") + "ä".encode() + (-1).to_bytes(8, "big", signed=True))
    assert decode_offset_metadata(encode_offset_metadata(7, {"b": 300, "ä": -1}), "x") == (7, {"b": 300, "ä": -1})
    assert decode_offset_metadata(base64.b64encode(b"\x02" + bytes(8)).decode(), "x") == (0, {})  # no entries


def test_offset_metadata_too_long_for_the_broker_leaves_the_node_times_out(caplog: pytest.LogCaptureFixture) -> None:
    many = {f"KSTREAM-AGGREGATE-STATE-STORE-{n:010d}": n for n in range(100)}
    with caplog.at_level(logging.WARNING):
        metadata = encode_offset_metadata(5, many, "task 0_3 in[3]")
    assert decode_offset_metadata(metadata, "x") == (5, {}) and len(metadata) < 4096
    assert "task 0_3 in[3]" in caplog.text and "100 nodes" in caplog.text


def test_offset_metadata_that_is_missing_foreign_or_of_another_version_is_unknown(
        caplog: pytest.LogCaptureFixture) -> None:
    assert decode_offset_metadata(None, "t") == (UNKNOWN, {})  # the embedded broker returns none
    assert decode_offset_metadata("", "t") == (UNKNOWN, {})
    with caplog.at_level(logging.WARNING):
        assert decode_offset_metadata("hello-123", "task 0_1 orders[1]") == (UNKNOWN, {})
        assert decode_offset_metadata(base64.b64encode(b"\x03" + bytes(8)).decode(), "task 0_1 orders[1]") \
            == (UNKNOWN, {})
        broken = base64.b64encode(b"\x02" + (9).to_bytes(8, "big") + (3).to_bytes(4, "big")).decode()
        assert decode_offset_metadata(broken, "task 0_1 orders[1]") == (9, {})  # the time is still good
    assert all("task 0_1 orders[1]" in record.getMessage() for record in caplog.records)
    assert "version 3" in caplog.records[1].getMessage()
    assert "unreadable node times" in caplog.records[2].getMessage()


def test_stream_time_record_round_trips_and_a_bad_one_names_where_it_is() -> None:
    times = {("orders", 3): (1_000, 17), ("payments", 3): (UNKNOWN, 0)}
    assert decode_record(encode_record(times), "x") == StreamTimeRecord(times, {})
    assert decode_record(encode_record(times, {"w": 900}), "x") == StreamTimeRecord(times, {"w": 900})
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
    # the windowed count's own time (keyed by its store) goes with the partition time
    assert committed.offset == 20 and decode_offset_metadata(committed.metadata, "in[0]") == (2_900, {"wcounts": 2_900})
    [(key, value, timestamp, partition)] = collector.sent[stream_time_topic(APP, 0)]
    assert (key, decode_record(value, "x"), timestamp, partition) == \
        (b"0_0", StreamTimeRecord({("in", 0): (2_900, 20)}, {"wcounts": 2_900}), 2_900, 0)
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
    metadata = {tp: decode_offset_metadata(c.metadata, str(tp))[0] for tp, c in collector.producer.committed.items()}
    assert metadata == {("left", 0): 1_900, ("right", 0): 5_100}
    assert collector.producer.committed[("right", 0)].offset == 2  # 5200.. are buffered, not processed
    [(_, value, _, _)] = collector.sent[stream_time_topic(APP, 0)]
    assert decode_record(value, "x") == StreamTimeRecord({("left", 0): (1_900, 10), ("right", 0): (5_100, 2)},
                                                         {"wcounts": 5_100})
    task.close()

    restarted = new_task(topology, tmp_path / "b", collector)
    recovery(collector).recover([restarted])
    assert restarted.stream_time == 5_100
    assert restarted.partition_times() == {("left", 0): 1_900, ("right", 0): 5_100}
    restarted.close()


def test_stream_time_records_past_the_committed_offset_or_of_an_uncommitted_partition_do_not_count() -> None:
    records = [StreamTimeRecord({("a", 0): (100, 10), ("b", 0): (500, 3)}, {"w": 400}),
               StreamTimeRecord({("a", 0): (900, 20), ("b", 0): (700, 4)}, {"w": 800})]
    assert time_at_offsets(records, {("a", 0): 15, ("b", 0): 4}) == {("a", 0): 100, ("b", 0): 700}
    assert time_at_offsets(records, {("a", 0): 5}) == {}  # "b" has no committed offset: replayed from its start
    # a node's time counts only from a record whose every offset is committed
    assert observed_at_offsets(records, {("a", 0): 15, ("b", 0): 4}) == {"w": 400}
    assert observed_at_offsets(records, {("a", 0): 20, ("b", 0): 4}) == {"w": 800}
    assert observed_at_offsets(records, {("a", 0): 20}) == {}


# -- node times across a restart --------------------------------------------------------------------------------------
def filtered_windowed_count() -> Topology:
    """Records valued "skip" are filtered out before the windowed count: they move the task's time, not the count's."""
    builder = StreamsBuilder()
    (builder.stream("in", key_serde=String, value_serde=String).filter(lambda k, v: v != "skip").group_by_key()
     .windowed_by(TimeWindows.of(SIZE, grace=GRACE)).count(Materialized.as_("wcounts")).to_stream().to("out"))
    return builder.build().bind(APP)


BEFORE_RESTART = [message("in", 0, 1_000), message("in", 1, 2_500),  # closes [1000, 2000) exactly: 2500 - 500
                  Message(topic="in", partition=0, offset=2, key=b"k", value=b"skip",
                          timestamp=(TIMESTAMP_CREATE_TIME, 50_000))]


def after_restart(task: StreamTask) -> tuple[int, int]:
    """Process a record for the window closed at the boundary, then one for the next window: (late, counted)."""
    late_before = task.late_records
    task.process_messages([message("in", 3, 1_999)])
    late = task.late_records - late_before
    task.process_messages([message("in", 4, 2_000)])
    return late, task.late_records - late_before - late


def test_a_new_task_goes_on_from_each_nodes_committed_time_not_the_tasks(tmp_path: Path) -> None:
    collector = _Collector()
    topology = filtered_windowed_count()
    first = run_and_commit(topology, tmp_path / "a", collector, BEFORE_RESTART)
    assert first.stream_time == 50_000 and first.observed_times() == {"wcounts": 2_500}
    first.close()
    assert decode_offset_metadata(collector.producer.committed[("in", 0)].metadata, "x") == (50_000,
                                                                                              {"wcounts": 2_500})

    restarted = new_task(topology, tmp_path / "b", collector)
    recovery(collector).recover([restarted])  # from the commit metadata
    assert restarted.stream_time == 50_000 and restarted.observed_times() == {"wcounts": 2_500}
    # 1999 is late for [1000, 2000) (closed at the boundary 2500 - 500); 2000 is on time for [2000, 3000): with the
    # task's time (50 s) it would be late too, with a time derived anew (-1) 1999 would reopen a closed window
    assert after_restart(restarted) == (1, 0)
    restarted.close()


@pytest.mark.integration
def test_a_new_task_takes_its_node_times_from_the_stream_time_topic_where_the_broker_keeps_no_metadata(
        tmp_path: Path, bootstrap: str, unique_name: str) -> None:
    collector = _Collector()
    topology = filtered_windowed_count()
    run_and_commit(topology, tmp_path / "a", collector, BEFORE_RESTART).close()
    [(_, value, _, _)] = collector.sent[stream_time_topic(APP, 0)]
    assert decode_record(value, "x") == StreamTimeRecord({("in", 0): (50_000, 3)}, {"wcounts": 2_500})
    collector.producer.committed[("in", 0)] = TopicPartition("in", 0, 3)  # the embedded broker: no metadata
    uncommitted = encode_record({("in", 0): (60_000, 9)}, {"wcounts": 9_000})  # its offsets were never committed
    topic = f"{unique_name}-0-stream-time"  # the topic's records, on a broker
    create_topics(bootstrap, {topic: 1})
    producer = Producer({"bootstrap.servers": bootstrap})
    for record in (value, uncommitted):
        producer.produce(topic, record, b"0_0", partition=0)
    assert producer.flush(30) == 0

    restarted = new_task(topology, tmp_path / "b", collector)
    StreamTimeRecovery(committed_of(collector), {"bootstrap.servers": bootstrap, "group.id": unique_name},
                       {0: topic}).recover([restarted])
    assert restarted.observed_times() == {"wcounts": 2_500}
    assert after_restart(restarted) == (1, 0)
    restarted.close()


def test_a_node_without_a_recorded_time_starts_from_the_tasks_committed_time(tmp_path: Path) -> None:
    collector = _Collector()
    topology = filtered_windowed_count()
    collector.producer.committed[("in", 0)] = TopicPartition("in", 0, 3, metadata=encode_offset_metadata(2_500))
    restarted = new_task(topology, tmp_path / "a", collector)  # committed by a Brook that recorded no node times
    recovery(collector).recover([restarted])
    assert restarted.observed_times() == {"wcounts": 2_500}  # never behind what may have closed windows
    restarted.close()
