"""A StreamTask's input buffers: processed in chunks in offset order, and handed over whole when the task is
rebuilt (the stream thread's backpressure and time cap rely on both)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import TIMESTAMP_CREATE_TIME, Message

from streaming import StreamsBuilder, StreamsConfig
from streaming.runtime.task import StreamTask


def task_over(topics: list[str], seen: list[Any], state_dir: Path) -> StreamTask:
    """A running task of a stateless topology that records what it processes (it sends nothing, so it needs
    no record collector)."""
    builder = StreamsBuilder()
    builder.stream(topics).foreach(lambda key, value: seen.append(value["n"]))
    topology = builder.build()
    topology.bind("app")
    config = StreamsConfig({"application.id": "app", "state.dir": str(state_dir)}, require_bootstrap=False)
    [subtopology] = topology.subtopologies()
    task = StreamTask(subtopology, 0, topology, config, None, lambda: 0)  # type: ignore[arg-type]
    task.open_stores()
    task.initialize_topology()
    return task


def run(topic: str, offsets: range, timestamp: int = 1_000) -> list[Message]:
    return [Message(topic=topic, partition=0, offset=o, key=b"k", value=orjson.dumps({"n": f"{topic}{o}"}),
                    timestamp=(TIMESTAMP_CREATE_TIME, timestamp + o)) for o in offsets]


def test_a_single_partition_task_processes_its_buffer_in_chunks_in_offset_order(tmp_path: Path) -> None:
    seen: list[Any] = []
    task = task_over(["in"], seen, tmp_path)
    task.buffer(run("in", range(5)))
    task.buffer(run("in", range(5, 10)))
    assert task.buffered_records == task.buffered_count(("in", 0)) == 10
    assert task.process_next(3) == 3
    assert seen == ["in0", "in1", "in2"]
    assert task.process_next(5) == 5  # the rest of the first run, then part of the second
    assert seen == [f"in{o}" for o in range(8)]
    assert task.last_processed.offset() == 7
    assert task.consumed == {("in", 0): 8}
    assert task.buffered_records == 2
    assert [[m.offset() for m in r] for r in task.take_unprocessed()] == [[8, 9]]
    assert task.buffered_records == 0 and task.process_next(100) == 0
    task.close()


def test_a_multi_partition_task_hands_over_what_it_has_not_processed(tmp_path: Path) -> None:
    seen: list[Any] = []
    task = task_over(["a", "b"], seen, tmp_path)
    task.buffer(run("a", range(4), timestamp=1_000))
    task.buffer(run("b", range(4), timestamp=1_002))
    assert task.buffered_count(("a", 0)) == 4 and task.buffered_records == 8
    assert task.process_next(4) == 4  # lowest timestamp first: a0 (1000), a1, then a2 (1002) before b0
    assert seen == ["a0", "a1", "a2", "b0"]
    assert [[(m.topic(), m.offset()) for m in r] for r in task.take_unprocessed()] == \
        [[("a", 3)], [("b", 1), ("b", 2), ("b", 3)]]
    assert task.buffered_records == 0
    task.close()


def test_a_suspended_task_forgets_its_unprocessed_input_of_every_kind(tmp_path: Path) -> None:
    """A suspended task's consumer reads again from the committed offsets if the task comes back, so nothing
    polled before the suspension may stay buffered: a stale run would be processed a second time."""
    seen: list[Any] = []
    single = task_over(["in"], seen, tmp_path / "single")
    single.buffer(run("in", range(5)))
    single.process_next(2)
    single.drop_buffered()
    assert single.buffered_records == 0 and single.process_next(100) == 0
    multi = task_over(["a", "b"], seen, tmp_path / "multi")
    multi.buffer(run("a", range(3)))
    multi.buffer(run("b", range(3)))
    multi.drop_buffered()
    assert multi.buffered_records == 0
    assert seen == ["in0", "in1"]
    single.close()
    multi.close()
