"""The idle watchdog on the embedded broker: a source topic that stops receiving records is reported idle (an
alert in ``<application.id>-alerts``, ``brook_source_idle`` = 1) and cleared when records flow again (a
``resumed`` alert, the gauge back to 0); the Dagster sensor turns the idle alert into a failed run of
``idle_alert_<app>`` naming the topic, and the resumed one into a skip reason."""

from __future__ import annotations

import json
import threading
import time

import dagster as dg
import pytest

from assets.idle_alerts import idle_alert_job, idle_alerts_sensor
from assets.resources import KafkaResource
from streaming import KafkaStreams, Serdes, StreamsBuilder
from streaming.admin import create_topics, partition_counts
from streaming.naming import alerts_topic
from streaming.testing.generators import GeneratedRecord
from streaming.testing.kafka import produce, read_topic, wait_for

pytestmark = pytest.mark.integration

TIMEOUT_MS = 1500


def gauge(streams: KafkaStreams, name: str, topic: str) -> float | None:
    values = [s.value for family in streams.metrics_registry.collect() for s in family.samples
              if s.name == name and s.labels.get("topic") == topic]
    return values[0] if values else None


def alerts(bootstrap: str, app_id: str) -> list[dict]:
    return [r.value for r in read_topic(bootstrap, alerts_topic(app_id), Serdes.String(), Serdes.Json(), 1)]


def records(start: int, count: int) -> list[GeneratedRecord]:
    return [GeneratedRecord(f"k{i}", {"n": i}, 1_700_000_000_000 + i) for i in range(start, start + count)]


def keep_producing(bootstrap: str, topic: str, stop: threading.Event) -> None:
    """A record every 0.2 s until ``stop`` is set."""
    n = 1000
    while not stop.wait(0.2):
        produce(bootstrap, topic, records(n, 1), Serdes.String(), Serdes.Json())
        n += 1


def test_an_idle_source_alerts_fails_a_dagster_run_and_clears(bootstrap: str, unique_name: str) -> None:
    source, sink = f"{unique_name}-in", f"{unique_name}-out"
    create_topics(bootstrap, {source: 2, sink: 2})
    builder = StreamsBuilder()
    builder.stream(source, key_serde=Serdes.String(), value_serde=Serdes.Json()).to(sink)
    streams = KafkaStreams(builder.build(), {"application.id": unique_name, "bootstrap.servers": bootstrap,
                                             "commit.interval.ms": 200, "processing.idle.timeout.ms": TIMEOUT_MS})
    app = "shop"
    job = idle_alert_job(app)
    sensor = idle_alerts_sensor(app, unique_name, job)
    kafka = KafkaResource(bootstrap_servers=bootstrap)
    streams.start()
    try:
        wait_for(lambda: streams.state.value == "RUNNING", 60, "the app to run")
        # The alerts topic is created at start-up, as other internal topics (configs: test_overflow_settings).
        assert partition_counts(bootstrap, [alerts_topic(unique_name)]) == {alerts_topic(unique_name): 1}
        produce(bootstrap, source, records(0, 50), Serdes.String(), Serdes.Json())
        wait_for(lambda: streams.metrics()["records_processed"] == 50, 30, "the first records to be processed")
        stopped = time.monotonic()
        wait_for(lambda: gauge(streams, "brook_source_idle", source) == 1, 30, "the source to be reported idle")
        assert time.monotonic() - stopped >= TIMEOUT_MS / 1000 - 1.1  # not before the timeout (1 s checks)
        assert gauge(streams, "brook_source_idle_seconds", source) >= TIMEOUT_MS / 1000
        wait_for(lambda: len(alerts(bootstrap, unique_name)) == 1, 30, "the idle alert")
        [idle] = alerts(bootstrap, unique_name)
        assert (idle["state"], idle["topic"], idle["partitions"], idle["application_id"]) == \
            ("idle", source, [0, 1], unique_name)
        assert idle["idle_ms"] >= TIMEOUT_MS
        seen = {int(p): s for p, s in idle["last_seen"].items()}
        ends = {p: max(r.offset for r in read_topic(bootstrap, source, Serdes.String(), Serdes.Json(), 2)
                       if r.partition == p) for p in (0, 1)}
        assert {p: s["offset"] for p, s in seen.items()} == ends
        assert all(s["timestamp"] >= 1_700_000_000_000 for s in seen.values())

        with dg.instance_for_test() as instance:
            context = dg.build_sensor_context(instance=instance, resources={"kafka": kafka})
            result = sensor(context)
            [request] = result.run_requests
            assert request.tags["brook/idle_topic"] == source
            run = job.execute_in_process(run_config=request.run_config, instance=instance, raise_on_error=False)
            assert not run.success
            [failure] = [e for e in run.all_events if e.is_step_failure]
            message = failure.step_failure_data.user_failure_data.description
            assert source in message and "[0, 1]" in message and "idle for" in message
            # Nothing new: nothing requested.
            again = sensor(dg.build_sensor_context(instance=instance, resources={"kafka": kafka},
                                                   cursor=result.cursor))
            assert not again.run_requests and "no new alert" in again.skip_reason.skip_message

            # Records flow again (a trickle, so the source does not go idle again before the sensor reads).
            flowing = threading.Event()
            trickle = threading.Thread(target=keep_producing, args=(bootstrap, source, flowing))
            trickle.start()
            try:
                wait_for(lambda: gauge(streams, "brook_source_idle", source) == 0, 30, "the idle gauge to clear")
                wait_for(lambda: len(alerts(bootstrap, unique_name)) == 2, 30, "the resumed alert")
                resumed = alerts(bootstrap, unique_name)[1]
                assert (resumed["state"], resumed["topic"]) == ("resumed", source)
                assert resumed["idle_ms"] >= TIMEOUT_MS
                cleared = sensor(dg.build_sensor_context(instance=instance, resources={"kafka": kafka},
                                                         cursor=again.cursor))
            finally:
                flowing.set()
                trickle.join()
            assert not cleared.run_requests
            assert "cleared" in cleared.skip_reason.skip_message and source in cleared.skip_reason.skip_message
            assert json.loads(cleared.cursor) == {"0": 2}
    finally:
        streams.close()
