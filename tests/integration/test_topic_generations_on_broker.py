"""A worker runs an app at its topics' new generation (partition scaling's migrate mode, issue 18): ``brook worker
run`` reads the app's ``topic_generations`` from the platform spec, reads ``in.v2``, writes and restores the
changelog ``...-counts-changelog.v2`` (and the stream-time topic ``...-0-stream-time.v2``), creates them with the new
generation's partition count, and leaves every generation-1 topic as it was. A repartition topic has generations
too, and processors see the logical topic names."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from streaming import KafkaStreams, Serdes, StreamsBuilder
from streaming.admin import create_topics, partition_counts
from streaming.errors import MissingSourceTopicError
from streaming.processor import Processor, ProcessorContext, Record
from streaming.testing.generators import GeneratedRecord
from streaming.testing.kafka import committed_offsets, produce, read_topic, wait_for
from streaming.testing.workers import stop_workers
from tests.integration.workloads import counting

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
OLD_PARTITIONS, NEW_PARTITIONS = 2, 3
KEYS = [f"key-{i}" for i in range(12)]


def write_spec(path: Path, bootstrap: str, app_id: str, source: str, sink: str) -> None:
    path.write_text(f"""
version: 1
default_cluster: test
clusters:
  test: {{bootstrap_servers: "{bootstrap}"}}
topics:
  {source}: {{partitions: {NEW_PARTITIONS}, value: string}}
  {sink}: {{partitions: 1}}
apps:
  counting:
    application_id: {app_id}
    topology: tests.integration.workloads.counting:topology
    config: unused.yaml
    inputs: [{source}]
    outputs: [{sink}]
    stores: [{{name: counts, partitions_from: {source}}}]
    topic_generations: {{{source}: 2, {app_id}-counts-changelog: 2, {app_id}-0-stream-time: 2}}
""")


def start_worker(bootstrap: str, app_id: str, state_dir: Path, spec: Path, source: str, sink: str,
                 log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "streaming.cli.main", "worker", "run", "tests.integration.workloads.counting:topology",
         "--platform-spec", str(spec), "--set", f"bootstrap.servers={bootstrap}", "--set", f"application.id={app_id}",
         "--set", f"state.dir={state_dir}", "--set", "commit.interval.ms=200"],
        cwd=ROOT, stdout=log.open("ab"), stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "COUNT_INPUT": source, "COUNT_OUTPUT": sink})


def records(keys: list[str], rounds: int, start: int) -> list[GeneratedRecord]:
    return [GeneratedRecord(key, f"v{i}", 1_700_000_000_000 + start + i)
            for i, key in enumerate(key for _ in range(rounds) for key in keys)]


def latest_counts(bootstrap: str, sink: str) -> dict[str, int]:
    return {r.key: r.value["count"] for r in read_topic(bootstrap, sink, Serdes.String(), Serdes.Json(), 1)}


def test_a_worker_reads_writes_and_restores_the_generation_the_spec_names(
        bootstrap: str, unique_name: str, tmp_path: Path) -> None:
    app_id, source, sink = unique_name, f"{unique_name}-in", f"{unique_name}-out"
    physical_source = f"{source}.v2"
    changelog, stream_time = f"{app_id}-counts-changelog", f"{app_id}-0-stream-time"
    create_topics(bootstrap, {source: OLD_PARTITIONS, physical_source: NEW_PARTITIONS, sink: 1})
    old_ends = produce(bootstrap, source, records(["old-a", "old-b"], 5, 0), Serdes.String(), Serdes.String())
    produce(bootstrap, physical_source, records(KEYS, 3, 0), Serdes.String(), Serdes.String())
    spec, state_dir, log = tmp_path / "platform.yaml", tmp_path / "state", tmp_path / "worker.log"
    write_spec(spec, bootstrap, app_id, source, sink)

    worker = start_worker(bootstrap, app_id, state_dir, spec, source, sink, log)
    try:
        wait_for(lambda: latest_counts(bootstrap, sink) == dict.fromkeys(KEYS, 3) or worker.poll() is not None,
                 120, "every key counted 3 times from the new generation")
        assert worker.poll() is None, log.read_text()
    finally:
        stop_workers([worker])
    assert worker.returncode == 0, log.read_text()
    text = log.read_text()
    assert f"{source} -> {physical_source}" in text
    assert f"{changelog} -> {changelog}.v2" in text

    # The internal topics of generation 2 exist with its partition count; those of generation 1 were never made.
    assert partition_counts(bootstrap, [f"{changelog}.v2", f"{stream_time}.v2", changelog, stream_time]) == {
        f"{changelog}.v2": NEW_PARTITIONS, f"{stream_time}.v2": NEW_PARTITIONS, changelog: None, stream_time: None}
    stored = {r.key: r.value for r in read_topic(bootstrap, f"{changelog}.v2", Serdes.String(), Serdes.Long(),
                                                 NEW_PARTITIONS)}
    assert stored == dict.fromkeys(KEYS, 3)
    # Generation 1 of the input is untouched: its records are all there and the group never committed on it.
    assert len(read_topic(bootstrap, source, Serdes.String(), Serdes.String(), OLD_PARTITIONS)) == sum(old_ends.values())
    assert committed_offsets(bootstrap, app_id, source, OLD_PARTITIONS) == dict.fromkeys(range(OLD_PARTITIONS), 0)
    assert sum(committed_offsets(bootstrap, app_id, physical_source, NEW_PARTITIONS).values()) == 3 * len(KEYS)

    # Without local state, a restart restores the store from the generation-2 changelog and counts on from there.
    shutil.rmtree(state_dir)
    produce(bootstrap, physical_source, records(KEYS, 1, 1_000), Serdes.String(), Serdes.String())
    first_run = len(log.read_text())
    worker = start_worker(bootstrap, app_id, state_dir, spec, source, sink, log)
    try:
        wait_for(lambda: latest_counts(bootstrap, sink) == dict.fromkeys(KEYS, 4) or worker.poll() is not None,
                 120, "every key counted a 4th time after the restore")
        assert worker.poll() is None, log.read_text()
    finally:
        stop_workers([worker])
    assert worker.returncode == 0, log.read_text()
    second_run = log.read_text()[first_run:]
    assert f"from {changelog}.v2[" in second_run
    assert sum(int(n) for n in re.findall(r"restored store 'counts' of task 0_\d: (\d+) records", second_run)) \
        >= len(KEYS)  # at least one value per key (the cache may have folded a key's updates into one)
    assert partition_counts(bootstrap, [changelog, stream_time]) == {changelog: None, stream_time: None}
    assert set(latest_counts(bootstrap, sink)) == set(KEYS)  # nothing of generation 1 was ever processed


class TopicOf(Processor[str, str]):
    """Forwards where each record came from, as the processor sees it."""

    def init(self, context: ProcessorContext) -> None:
        self.context = context

    def process(self, record: Record[str, str]) -> None:
        self.context.forward(record.with_value({"topic": self.context.topic, "partition": self.context.partition}))


def test_repartition_topics_have_generations_and_processors_see_logical_topic_names(
        bootstrap: str, unique_name: str) -> None:
    app_id, source, sink = unique_name, f"{unique_name}-in", f"{unique_name}-out"
    repartition = f"{app_id}-moved-repartition"
    create_topics(bootstrap, {source: OLD_PARTITIONS, f"{source}.v2": NEW_PARTITIONS, sink: 1})
    produce(bootstrap, f"{source}.v2", records(KEYS, 1, 0), Serdes.String(), Serdes.String())
    builder = StreamsBuilder()
    builder.stream(source, key_serde=Serdes.String(), value_serde=Serdes.String()).repartition(name="moved") \
        .process_values(TopicOf).to(sink, value_serde=Serdes.Json())
    streams = KafkaStreams(builder.build(), {
        "application.id": app_id, "bootstrap.servers": bootstrap, "commit.interval.ms": 200,
        "topic.generations": {source: 2, repartition: 3}})
    streams.start()
    try:
        wait_for(lambda: len(read_topic(bootstrap, sink, Serdes.String(), Serdes.Json(), 1)) == len(KEYS), 90,
                 "every record through the repartition topic")
    finally:
        assert streams.close(30)
    assert streams.exception is None
    assert {r.value["topic"] for r in read_topic(bootstrap, sink, Serdes.String(), Serdes.Json(), 1)} == {repartition}
    assert partition_counts(bootstrap, [f"{repartition}.v3", repartition]) == {
        f"{repartition}.v3": NEW_PARTITIONS, repartition: None}
    assert len(read_topic(bootstrap, f"{repartition}.v3", Serdes.String(), Serdes.String(), NEW_PARTITIONS)) == len(KEYS)


def test_a_missing_generation_is_named_with_its_logical_topic(bootstrap: str, unique_name: str,
                                                              tmp_path: Path) -> None:
    source, sink = f"{unique_name}-in", f"{unique_name}-out"
    create_topics(bootstrap, {source: OLD_PARTITIONS, sink: 1})  # generation 1 only
    streams = KafkaStreams(counting.topology(source, sink), {
        "application.id": unique_name, "bootstrap.servers": bootstrap, "state.dir": str(tmp_path),
        "topic.generations": {source: 2}})
    with pytest.raises(MissingSourceTopicError, match=re.escape(f"['{source}.v2 (generation 2 of {source})']")):
        streams.start()
    assert partition_counts(bootstrap, [f"{unique_name}-counts-changelog"]) == {f"{unique_name}-counts-changelog": None}


def test_interactive_queries_find_keys_in_the_partitions_of_the_generation(bootstrap: str, unique_name: str,
                                                                            tmp_path: Path) -> None:
    source, sink = f"{unique_name}-in", f"{unique_name}-out"
    create_topics(bootstrap, {source: OLD_PARTITIONS, f"{source}.v2": NEW_PARTITIONS, sink: 1})
    produce(bootstrap, f"{source}.v2", records(KEYS, 2, 0), Serdes.String(), Serdes.String())
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        server = f"127.0.0.1:{sock.getsockname()[1]}"
    streams = KafkaStreams(counting.topology(source, sink), {
        "application.id": unique_name, "bootstrap.servers": bootstrap, "state.dir": str(tmp_path),
        "commit.interval.ms": 200, "application.server": server,
        "topic.generations": {source: 2, f"{unique_name}-counts-changelog": 2, f"{unique_name}-0-stream-time": 2}})
    streams.start()
    try:
        wait_for(lambda: latest_counts(bootstrap, sink) == dict.fromkeys(KEYS, 2), 90, "every key counted twice")
        partition_of = {r.key: r.value["partition"] for r in read_topic(bootstrap, sink, Serdes.String(),
                                                                         Serdes.Json(), 1)}
        assert len(set(partition_of.values())) > OLD_PARTITIONS  # the keys spread over generation 2's partitions
        for key in KEYS:
            metadata = streams.metadata_for_key("counts", key)
            assert (metadata.active_host, metadata.partition) == (server, partition_of[key])
            assert streams.query("counts", key) == 2
    finally:
        assert streams.close(30)
