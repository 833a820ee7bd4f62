"""A new task whose stream time the broker does not give is retried, not fatal (task.timeout.ms, KIP-572).

One stream thread runs two tasks: 0_0, stateless (``plain`` to ``plain-out``), and 1_0, a windowed count (a logged
store, so its tasks keep their stream time in ``<app>-1-stream-time``). A first instance processes records up to
20.9 s of stream time and stops. Then the broker is made unreachable for the stream-time reader alone: every
client goes through :class:`~tests.integration.kafka_proxy.KafkaProxy`, which holds back the requests of that
client id and passes everyone else's. A second instance starts with a late record (its window closed at 3.5 s of
stream time) first in line for task 1_0.

* While the reader gets no answer, task 1_0 waits (its input paused) and the thread processes task 0_0's input;
  once the proxy lets the reader through, task 1_0 goes on from the stream time of its last commit: the late
  record is dropped to the late-records topic, not counted, and the records after it are counted.
* With ``task.timeout.ms=3000`` and the reader never answered, the thread fails after 3 s without progress, with
  an error naming the task, the stream-time topic and partition, and how long it waited.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from streaming import KafkaStreams, Materialized, StreamsBuilder, TimeWindows, Topology
from streaming.admin import create_topics
from streaming.broker import EmbeddedBroker
from streaming.errors import TaskTimeoutError
from streaming.naming import stream_time_topic
from streaming.runtime.kafka_streams import State
from streaming.testing.generators import GeneratedRecord
from streaming.testing.kafka import committed_offsets, produce, read_topic, wait_for
from streaming.testing.ports import free_port
from tests.integration.kafka_proxy import KafkaProxy
from tests.integration.workloads.windowed_count import GRACE, SIZE, WINDOWED, Long, String

pytestmark = [pytest.mark.integration, pytest.mark.slow]
KEYS = ["a", "b", "c"]
START, STEP, COUNT = 1_000, 100, 200  # on-time records at 1000..20900 ms
LATE_AT = 2_000  # window [2000, 3000): closed once stream time passed 3500 ms
HELD_S = 4.0  # how long the second instance's reader gets no answer


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator[tuple[str, KafkaProxy]]:
    """An embedded broker that every client reaches through a KafkaProxy: (bootstrap servers, proxy)."""
    # The proxy serves before the broker starts: the broker's start-up check reads metadata, after which
    # librdkafka may already talk to the advertised address (the proxy); a proxy not accepting yet left that
    # check without an answer for its 30 s once in CI.
    port = free_port()
    proxy = KafkaProxy().start(port)
    with EmbeddedBroker(port=port, advertised_port=proxy.port, workdir=tmp_path / "broker"):
        yield f"{proxy.host}:{proxy.port}", proxy


def topology(names: dict[str, str]) -> Topology:
    builder = StreamsBuilder()
    builder.stream(names["plain"], key_serde=String, value_serde=String).to(names["plain-out"])
    (builder.stream(names["events"], key_serde=String, value_serde=String)
     .group_by_key()
     .windowed_by(TimeWindows.of(SIZE, grace=GRACE), late_records_topic=names["late"])
     .count(Materialized.as_("wcounts").with_retention(10**9))
     .to_stream().to(names["counts"], key_serde=WINDOWED, value_serde=Long))
    return builder.build()


def config(bootstrap: str, app_id: str, state_dir: Path, **extra: object) -> dict[str, object]:
    return {"application.id": app_id, "bootstrap.servers": bootstrap, "state.dir": str(state_dir),
            "commit.interval.ms": 200, **extra}


def setup(bootstrap: str, app_id: str) -> dict[str, str]:
    names = {name: f"{app_id}-{name}" for name in ("plain", "plain-out", "events", "late", "counts")}
    create_topics(bootstrap, dict.fromkeys(names.values(), 1))
    return names


def first_run(bootstrap: str, app_id: str, names: dict[str, str], state_dir: Path) -> None:
    """Process on-time records up to 20.9 s of stream time and stop cleanly (the stream-time record is written)."""
    on_time = [GeneratedRecord(KEYS[n % len(KEYS)], "v", START + STEP * n) for n in range(COUNT)]
    ends = produce(bootstrap, names["events"], on_time, String, String)
    app = KafkaStreams(topology(names), config(bootstrap, app_id, state_dir))
    app.start()
    try:
        wait_for(lambda: committed_offsets(bootstrap, app_id, names["events"], 1) == ends, 60,
                 "the first instance to commit its input")
    finally:
        assert app.close(30) and app.exception is None
    assert read_topic(bootstrap, stream_time_topic(app_id, 1), String, String, 1), "no stream-time record written"


def task(app: KafkaStreams, task_id: str) -> object:
    [thread] = app._threads
    return thread.tasks.tasks.get(task_id)


def test_a_task_whose_stream_time_the_broker_holds_back_is_retried_while_the_other_task_processes(
        proxied: tuple[str, KafkaProxy], unique_name: str, tmp_path: Path) -> None:
    bootstrap, proxy = proxied
    names = setup(bootstrap, unique_name)
    first_run(bootstrap, unique_name, names, tmp_path / "state")

    reader = f"{unique_name}-stream-time-reader"
    proxy.hold(reader)
    late = [GeneratedRecord(key, "late", LATE_AT) for key in KEYS]
    on_time = [GeneratedRecord(key, "v", START + STEP * COUNT) for key in KEYS]
    ends = produce(bootstrap, names["events"], late + on_time, String, String)
    plain = [GeneratedRecord(f"p{n}", f"plain {n}", 1_000 + n) for n in range(50)]
    produce(bootstrap, names["plain"], plain, String, String)
    app = KafkaStreams(topology(names), config(bootstrap, unique_name, tmp_path / "state"))
    app.start()
    try:
        wait_for(lambda: len(read_topic(bootstrap, names["plain-out"], String, String, 1, 5)) == len(plain), 60,
                 "task 0_0 to process its input while task 1_0 waits for its stream time")
        held_since = time.monotonic()
        while time.monotonic() - held_since < HELD_S:  # the reader is asked again and again; nothing fails
            waiting = task(app, "1_0")
            assert waiting is not None and not waiting.initialized, "task 1_0 started without its stream time"
            assert app.exception is None and app.state is not State.ERROR
            time.sleep(0.2)
        assert proxy.held_requests[reader] > 0, "the reader never asked the broker"
        proxy.release(reader)
        wait_for(lambda: committed_offsets(bootstrap, unique_name, names["events"], 1) == ends, 60,
                 "task 1_0 to get its stream time and process its input")
        assert app.state is State.RUNNING
    finally:
        proxy.release(reader)
        assert app.close(30)
    assert app.exception is None

    dropped = read_topic(bootstrap, names["late"], String, String, 1)
    assert sorted((r.key, r.timestamp) for r in dropped) == [(key, LATE_AT) for key in KEYS], \
        "task 1_0 went on from its committed stream time: the late records are dropped, none counted"
    counts = read_topic(bootstrap, names["counts"], WINDOWED, Long, 1)
    window = START + STEP * COUNT - (START + STEP * COUNT) % SIZE
    assert {(r.key.key, r.value) for r in counts if r.key.window.start == window} >= {(key, 1) for key in KEYS}, \
        "the on-time records after the late ones are counted"
    assert not [r for r in counts if r.key.window.start == LATE_AT and r.timestamp == LATE_AT]


def test_a_task_that_makes_no_progress_for_task_timeout_ms_fails_the_thread_naming_what_it_waited_for(
        proxied: tuple[str, KafkaProxy], unique_name: str, tmp_path: Path) -> None:
    bootstrap, proxy = proxied
    names = setup(bootstrap, unique_name)
    first_run(bootstrap, unique_name, names, tmp_path / "state")

    reader = f"{unique_name}-stream-time-reader"
    proxy.hold(reader)
    plain = [GeneratedRecord(f"p{n}", f"plain {n}", 1_000 + n) for n in range(50)]
    produce(bootstrap, names["plain"], plain, String, String)
    app = KafkaStreams(topology(names), config(bootstrap, unique_name, tmp_path / "state", **{"task.timeout.ms": 3000}))
    started = time.monotonic()
    app.start()
    try:
        wait_for(lambda: app.state is State.ERROR, 60, "the thread to fail after task.timeout.ms")
        failed_after = time.monotonic() - started
    finally:
        proxy.release(reader)
        app.close(30)
    error = app.exception
    assert isinstance(error, TaskTimeoutError) and error.task_id == "1_0"
    message = str(error)
    assert message.startswith("task 1_0 did not make progress within ")
    waited_ms = int(message.split("within ")[1].split(" ms")[0])
    assert 3_000 < waited_ms < 3_000 + 1_000, message
    assert f"from {stream_time_topic(unique_name, 1)}[0]: no partition EOF" in message and "task.timeout.ms" in message
    assert failed_after >= 3.0
    assert len(read_topic(bootstrap, names["plain-out"], String, String, 1)) == len(plain), \
        "task 0_0 processed while task 1_0 waited"
