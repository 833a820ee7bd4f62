"""A call that waits for the broker says so in the log while it waits; the record collector's flush waits as long
as librdkafka holds the records (no cap of its own), then fails naming what librdkafka said."""

from __future__ import annotations

import logging
import re
import socket
import time

import pytest

from streaming.errors import ProductionError
from streaming.rdkafka_logging import RDKAFKA_LOGGER
from streaming.runtime.broker_waits import BROKER_WAITS, BrokerWaits
from streaming.runtime.record_collector import KafkaRecordCollector
from streaming.runtime.streams_producer import AtLeastOnceProducer


def test_a_long_wait_is_logged_while_it_lasts_and_when_it_ends(caplog: pytest.LogCaptureFixture) -> None:
    waits = BrokerWaits(warn_after=0.2)
    with caplog.at_level(logging.INFO, logger="streaming.runtime.broker_waits"), waits.waiting("a test waits"):
        time.sleep(1.0)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert 2 <= len(warnings) <= 5, warnings  # one every 0.2 s (checked every 0.1 s), not one per check
    assert all("a test waits for" in w and "broker down or unreachable?" in w for w in warnings)
    done = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert len(done) == 1 and re.search(r"a test waits: done after \d+\.\d s$", done[0]), done


def test_a_short_wait_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    waits = BrokerWaits(warn_after=0.5)
    with caplog.at_level(logging.INFO, logger="streaming.runtime.broker_waits"), waits.waiting("a test waits"):
        time.sleep(0.05)
    time.sleep(0.6)  # the watcher had its chances
    assert not caplog.records


def test_flush_waits_for_the_producers_own_timeout_and_logs_the_outage(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as sock:  # a port nothing listens on: the broker is down
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setattr(BROKER_WAITS, "warn_after", 0.5)
    config = {"bootstrap.servers": f"127.0.0.1:{port}", "message.timeout.ms": 2500, "logger": RDKAFKA_LOGGER}
    collector = KafkaRecordCollector(lambda on_error: AtLeastOnceProducer(config, None, on_error), None)
    collector.send("out", b"k", b"v", 1_700_000_000_000, None)
    started = time.monotonic()
    with caplog.at_level(logging.INFO, logger="streaming.runtime.broker_waits"), \
            pytest.raises(ProductionError, match="topic 'out'.*timed out"):
        collector.flush()
    assert 2.0 <= time.monotonic() - started < 10  # librdkafka's message.timeout.ms ended the wait, nothing earlier
    assert any("broker down or unreachable?" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    collector.close()
