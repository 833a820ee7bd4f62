"""Group joins on the embedded broker: a worker stopped during its first join (the README tour's
``app.start(); ...; app.close()``) must not leave the next worker with the same application.id waiting.

Tansu 0.6.0 keeps a member that leaves a group before it has formed as the group's leader, so every later
member's SyncGroup answers REBALANCE_IN_PROGRESS for many minutes (docs/broker-limits.md). A stopping stream
thread therefore finishes its join before it leaves (``StreamThread._finish_join``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from streaming import KafkaStreams, Serdes, StreamsBuilder
from streaming.admin import create_topics
from streaming.runtime.kafka_streams import State
from streaming.runtime.stream_thread import WAITING_LOG_S
from streaming.testing.kafka import wait_for

pytestmark = pytest.mark.integration


def pass_through(bootstrap: str, unique_name: str, tmp_path: Path) -> Callable[[str], KafkaStreams]:
    """A copy from ``<name>-in`` to ``<name>-out`` (2 partitions each): a new instance of it per call, each with its
    own state directory."""
    source, sink = f"{unique_name}-in", f"{unique_name}-out"
    create_topics(bootstrap, {source: 2, sink: 2})
    builder = StreamsBuilder()
    builder.stream(source, key_serde=Serdes.String(), value_serde=Serdes.String()).to(sink)
    topology = builder.build()
    return lambda name: KafkaStreams(topology, {"application.id": unique_name, "bootstrap.servers": bootstrap,
                                                "state.dir": f"{tmp_path}/{name}"})


def test_an_instance_closed_during_its_first_join_does_not_block_the_next(
        bootstrap: str, unique_name: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    instance = pass_through(bootstrap, unique_name, tmp_path)
    caplog.set_level(logging.INFO, logger="streaming.runtime.stream_thread")
    first = instance("first")
    first.start()
    time.sleep(1.0)  # inside its first join (~3 s on the embedded broker)
    joining = first.state is State.REBALANCING
    assert first.close(30)
    if joining:
        assert "is stopping during a group join" in caplog.text

    second = instance("second")
    started = time.monotonic()
    second.start()
    try:
        wait_for(lambda: second.state is State.RUNNING, 60, "the next instance to get its assignment")
        waited = time.monotonic() - started
    finally:
        assert second.close(30)
    assert first.exception is None and second.exception is None
    if waited > WAITING_LOG_S + 1:  # it waited: it said so while waiting
        assert "waits for its partition assignment" in caplog.text
