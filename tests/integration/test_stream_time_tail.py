"""A new task reads only the tail of its stream-time partition, however long the topic grew (the embedded broker
never compacts it), and reads further back only when the tail holds no record at or before its committed offset."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer, TopicPartition

from streaming.admin import create_topics
from streaming.runtime import stream_time
from streaming.runtime.stream_time import TAIL_RECORDS, StreamTimeRecovery, encode_offset_metadata, encode_record
from tests.integration.task_stand_ins import RecoveringTask

pytestmark = pytest.mark.integration


def test_a_new_task_reads_the_tail_and_further_back_only_when_the_tail_has_no_record_that_counts(
        bootstrap: str, unique_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    topic, source = f"{unique_name}-0-stream-time", f"{unique_name}-in"
    create_topics(bootstrap, {topic: 2})
    # Batches of at most 100 records: the embedded broker's ListOffsets "latest" answers the last batch's base + 1.
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.num.messages": 100})
    # Task 0_0: 5 x TAIL_RECORDS commits, each at the next 10 offsets and 1 s later; the last one counts.
    for n in range(5 * TAIL_RECORDS):
        producer.produce(topic, encode_record({(source, 0): (1_000 * n, 10 * n)}), b"0_0", partition=0)
    # Task 0_1: 3 x TAIL_RECORDS commits that count, then 2 x TAIL_RECORDS written for commits that failed (past
    # the committed offset): the tail holds none that counts, so the reader goes back for the last one that does.
    for n in range(3 * TAIL_RECORDS):
        producer.produce(topic, encode_record({(source, 1): (1_000 * n, 10 * n)}), b"0_1", partition=1)
    for n in range(2 * TAIL_RECORDS):
        producer.produce(topic, encode_record({(source, 1): (10**9 + n, 10**6 + n)}), b"0_1", partition=1)
    assert producer.flush(30) == 0
    committed = {(source, 0): 10 * (5 * TAIL_RECORDS - 1), (source, 1): 10 * (3 * TAIL_RECORDS - 1)}

    read: list[int] = []  # records decoded, per round
    decode = stream_time.decode_record
    monkeypatch.setattr(stream_time, "decode_record", lambda value, where: read.append(1) or decode(value, where))

    def committed_offsets(partitions: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, committed[(tp.topic, tp.partition)]) for tp in partitions]

    tasks = [RecoveringTask("0_0", 0, [(source, 0)]), RecoveringTask("0_1", 1, [(source, 1)])]
    StreamTimeRecovery(committed_offsets, {"bootstrap.servers": bootstrap, "group.id": unique_name},
                       {0: topic}).recover(tasks)

    assert tasks[0].times == {(source, 0): 1_000 * (5 * TAIL_RECORDS - 1)}
    assert tasks[1].times == {(source, 1): 1_000 * (3 * TAIL_RECORDS - 1)}, "the last record that counts, not a later one"
    total = 10 * TAIL_RECORDS
    # Task 0_0: its tail (TAIL_RECORDS, and up to a batch more where ListOffsets answers low); task 0_1: its tail,
    # then the 4 x TAIL_RECORDS before it. Not the 10,000 records of the two partitions.
    assert len(read) <= 6 * TAIL_RECORDS + 200 < total, f"read {len(read)} of {total} stream-time records"


def test_recovery_takes_the_highest_of_metadata_and_the_stream_time_records_at_or_before_the_committed_offset(
        bootstrap: str, unique_name: str) -> None:
    topic, source = f"{unique_name}-0-stream-time", f"{unique_name}-in"
    create_topics(bootstrap, {topic: 1})
    producer = Producer({"bootstrap.servers": bootstrap})
    for times in ({(source, 0): (3_000, 30)}, {(source, 0): (6_000, 50)},
                  {(source, 0): (9_000, 80)}):  # written, then the offset commit failed (or the worker died)
        producer.produce(topic, encode_record(times), b"0_0", partition=0)
    assert producer.flush(30) == 0

    def committed_offsets(partitions: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        return [TopicPartition(source, 0, 50, metadata=encode_offset_metadata(4_000))]

    task = RecoveringTask("0_0", 0, [(source, 0)])
    StreamTimeRecovery(committed_offsets, {"bootstrap.servers": bootstrap, "group.id": unique_name},
                       {0: topic}).recover([task])
    assert task.stream_time_topic == topic
    assert task.times == {(source, 0): 6_000}  # the record at the committed offset beats the metadata's 4,000
