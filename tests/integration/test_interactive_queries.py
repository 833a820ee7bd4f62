"""Interactive queries on the embedded broker: local store views, metadata_for_key across two instances
(announced on ``<application.id>-metadata``), and the HTTP endpoint (200 / 404 / 421 / 503)."""

from __future__ import annotations

import collections
import json
import socket
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from streaming import KafkaStreams, Serdes, Stores, Topology
from streaming.admin import create_topics
from streaming.errors import InvalidStateStoreError, StreamsError, UnknownStateStoreError
from streaming.processor import Processor, ProcessorContext, Record
from streaming.runtime.kafka_streams import State
from streaming.runtime.partitioning import partition_for_key
from streaming.testing.generators import GeneratedRecord
from streaming.testing.kafka import produce, wait_for

pytestmark = pytest.mark.integration

PARTITIONS = 4
STORE = "counts"


class CountProcessor(Processor[str, str]):
    def init(self, context: ProcessorContext) -> None:
        self.store = context.get_state_store(STORE)

    def process(self, record: Record[str, str]) -> None:
        self.store.put(record.key, (self.store.get(record.key) or 0) + 1)


def counting_topology(topic: str) -> Topology:
    builder = Stores.key_value_store_builder(Stores.persistent_key_value_store(STORE), Serdes.String(), Serdes.Long())
    return (Topology()
            .add_source("input", topic, key_serde=Serdes.String(), value_serde=Serdes.String())
            .add_processor("count", CountProcessor, "input")
            .add_state_store(builder.with_logging_enabled(), "count"))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http_get(host: str, path: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://{host}{path}", timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def records(count: int) -> tuple[list[GeneratedRecord], dict[str, int]]:
    """``count`` records over 37 keys with uneven counts; and the oracle (count per key)."""
    keys = [f"user-{i:03d}" for i in range(37)]
    generated = [GeneratedRecord(keys[(i * i + 3 * i) % len(keys)], f"v{i}", 1_700_000_000_000 + i)
                 for i in range(count)]
    return generated, dict(collections.Counter(r.key for r in generated))


def config(bootstrap: str, app_id: str, state_dir: Path, port: int | None) -> dict[str, Any]:
    settings: dict[str, Any] = {"application.id": app_id, "bootstrap.servers": bootstrap,
                                "commit.interval.ms": 200, "state.dir": str(state_dir)}
    if port is not None:
        settings["application.server"] = f"127.0.0.1:{port}"
    return settings


def local_counts(app: KafkaStreams) -> dict[str, int] | None:
    """Everything in the local store, or None while it is not queryable."""
    try:
        return dict(app.store(STORE).all())
    except InvalidStateStoreError:
        return None


def test_one_instance_store_view_http_and_metadata(bootstrap: str, unique_name: str, tmp_path: Path) -> None:
    topic = f"{unique_name}-in"
    create_topics(bootstrap, {topic: PARTITIONS})
    generated, oracle = records(300)
    produce(bootstrap, topic, generated, Serdes.String(), Serdes.String())
    port = free_port()
    host = f"127.0.0.1:{port}"
    app = KafkaStreams(counting_topology(topic), config(bootstrap, unique_name, tmp_path, port))
    with pytest.raises(InvalidStateStoreError, match="not started"):
        app.store(STORE)
    with pytest.raises(UnknownStateStoreError, match="'counts'"):
        app.store("nope")
    app.start()
    try:
        wait_for(lambda: local_counts(app) == oracle, 60, "the store to hold every count")
        assert app.state is State.RUNNING
        view = app.store(STORE)
        assert all(view.get(key) == count for key, count in oracle.items())
        assert view.get("no-such-user") is None
        everything = list(view.all())
        assert [k for k, _ in everything] == sorted(oracle)  # serialized (UTF-8) order = str order here
        assert list(view.range("user-010", "user-014")) == [(k, oracle[k]) for k in sorted(oracle)
                                                             if "user-010" <= k <= "user-014"]
        assert list(view.prefix_scan("user-02")) == [(k, oracle[k]) for k in sorted(oracle) if k.startswith("user-02")]
        assert list(view.range("user-020", "user-010")) == []
        assert view.approximate_num_entries() > 0
        with pytest.raises(UnknownStateStoreError, match="known key-value stores: 'counts'"):
            app.store("nope")

        for key in sorted(oracle)[:10]:
            status, body = http_get(host, f"/stores/{STORE}/{quote(key)}")
            assert status == 200, body
            assert body == {"store": STORE, "key": key, "value": oracle[key],
                            "partition": partition_for_key(key.encode(), PARTITIONS), "host": host}
            metadata = app.metadata_for_key(STORE, key)
            assert (metadata.active_host, metadata.standby_hosts) == (host, [])
            assert metadata.partition == body["partition"]
        status, body = http_get(host, f"/stores/{STORE}/no-such-user")
        assert (status, body["error"]) == (404, "not found")
        status, body = http_get(host, "/stores/nope/x")
        assert (status, body["error"], body["known_stores"]) == (404, "unknown store", [STORE])
        status, body = http_get(host, "/health")
        assert (status, body["state"], body["host"]) == (200, "RUNNING", host)
        assert sorted(body["active_tasks"]) == [f"0_{p}" for p in range(PARTITIONS)]
    finally:
        assert app.close(30)
    assert app.exception is None
    with pytest.raises(InvalidStateStoreError, match="NOT_RUNNING"):
        app.store(STORE).get("user-001")
    with pytest.raises(OSError):
        http_get(host, "/health")  # the endpoint stopped with the instance


def test_metadata_without_application_server_is_a_clear_error(bootstrap: str, unique_name: str,
                                                              tmp_path: Path) -> None:
    topic = f"{unique_name}-in"
    create_topics(bootstrap, {topic: PARTITIONS})
    app = KafkaStreams(counting_topology(topic), config(bootstrap, unique_name, tmp_path, None))
    app.start()
    try:
        with pytest.raises(StreamsError, match="application.server"):
            app.metadata_for_key(STORE, "k")
    finally:
        assert app.close(30)


def test_two_instances_metadata_names_the_owner_and_http_redirects(bootstrap: str, unique_name: str,
                                                                   tmp_path: Path) -> None:
    topic = f"{unique_name}-in"
    create_topics(bootstrap, {topic: PARTITIONS})
    generated, oracle = records(400)
    produce(bootstrap, topic, generated, Serdes.String(), Serdes.String())
    topology_a, topology_b = counting_topology(topic), counting_topology(topic)
    ports = free_port(), free_port()
    while ports[0] == ports[1]:
        ports = ports[0], free_port()
    hosts = [f"127.0.0.1:{port}" for port in ports]
    a = KafkaStreams(topology_a, config(bootstrap, unique_name, tmp_path / "a", ports[0]))
    b = KafkaStreams(topology_b, config(bootstrap, unique_name, tmp_path / "b", ports[1]))
    by_host = dict(zip(hosts, (a, b), strict=True))
    a.start()
    b.start()
    try:
        def settled() -> bool:
            counts_a, counts_b = local_counts(a), local_counts(b)
            if counts_a is None or counts_b is None or not counts_a or not counts_b:
                return False
            return not counts_a.keys() & counts_b.keys() and {**counts_a, **counts_b} == oracle

        wait_for(settled, 90, "both instances to run tasks and hold every count between them")
        keys = sorted(oracle)

        def metadata_agrees() -> bool:
            for key in keys:
                for app in (a, b):
                    metadata = app.metadata_for_key(STORE, key)
                    if metadata.active_host is None or by_host[metadata.active_host].store(STORE).get(key) is None:
                        return False
            return True

        wait_for(metadata_agrees, 30, "the announced assignments to match the local stores")
        owners = collections.Counter()
        for key in keys:
            metadata = a.metadata_for_key(STORE, key)
            assert metadata == b.metadata_for_key(STORE, key)
            assert metadata.partition == partition_for_key(key.encode(), PARTITIONS)
            assert metadata.standby_hosts == []
            owner = by_host[metadata.active_host]
            other = b if owner is a else a
            assert owner.store(STORE).get(key) == oracle[key]  # the named instance has the key locally
            assert other.store(STORE).get(key) is None
            owners[metadata.active_host] += 1
        assert set(owners) == set(hosts), "both instances should own some keys"

        for key in keys[:8]:
            owner = a.metadata_for_key(STORE, key).active_host
            wrong = next(h for h in hosts if h != owner)
            status, body = http_get(wrong, f"/stores/{STORE}/{quote(key)}")
            assert status == 421, body
            assert (body["error"], body["owner"], body["partition"]) == (
                "not local", owner, partition_for_key(key.encode(), PARTITIONS))
            status, body = http_get(body["owner"], f"/stores/{STORE}/{quote(key)}")
            assert status == 200, body
            assert (body["value"], body["host"]) == (oracle[key], owner)
    finally:
        assert a.close(30) and b.close(30)
    assert a.exception is None and b.exception is None


def test_standby_hosts_come_from_the_announcements(bootstrap: str, unique_name: str, tmp_path: Path) -> None:
    topic = f"{unique_name}-in"
    create_topics(bootstrap, {topic: PARTITIONS})
    generated, oracle = records(100)
    produce(bootstrap, topic, generated, Serdes.String(), Serdes.String())
    ports = free_port(), free_port()
    while ports[0] == ports[1]:
        ports = ports[0], free_port()
    hosts = [f"127.0.0.1:{port}" for port in ports]
    apps = [KafkaStreams(counting_topology(topic), {**config(bootstrap, unique_name, tmp_path / str(i), port),
                                                    "num.standby.replicas": 1})
            for i, port in enumerate(ports)]
    for app in apps:
        app.start()
    try:
        def standbys_announced() -> bool:
            if any(app.state is not State.RUNNING for app in apps):
                return False
            for key in oracle:
                metadata = apps[0].metadata_for_key(STORE, key)
                if metadata.active_host is None or metadata.standby_hosts != [h for h in hosts
                                                                              if h != metadata.active_host]:
                    return False
            return True

        wait_for(standbys_announced, 60, "each key to have one active and one standby host")
        for host in hosts:
            status, health = http_get(host, "/health")
            assert status == 200 and health["active_tasks"] and health["standby_tasks"]
            assert not set(health["active_tasks"]) & set(health["standby_tasks"])
    finally:
        assert all(app.close(30) for app in apps)


def test_a_failed_start_leaves_nothing_running(bootstrap: str, unique_name: str, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 6, item 10: when start() fails after the metadata publisher started, the publisher stops and
    takes its announcement back (tombstone), the HTTP port is released, and the instance ends NOT_RUNNING."""
    import threading

    from streaming.runtime import interactive_queries
    from streaming.testing.kafka import read_topic

    def broken_reader(*args: Any, **kwargs: Any) -> None:
        raise StreamsError("metadata reader cannot start (injected)")

    monkeypatch.setattr(interactive_queries, "AssignmentReader", broken_reader)
    topic = f"{unique_name}-in"
    create_topics(bootstrap, {topic: PARTITIONS})
    port = free_port()
    app = KafkaStreams(counting_topology(topic), config(bootstrap, unique_name, tmp_path, port))
    with pytest.raises(StreamsError, match="injected"):
        app.start()
    assert app.state is State.NOT_RUNNING
    assert [t.name for t in threading.enumerate() if t.name.endswith("-publisher")] == []
    announcements = read_topic(bootstrap, f"{unique_name}-metadata", Serdes.String(), Serdes.Bytes(), 1)
    assert announcements and announcements[-1].value is None  # the host's announcement, then its tombstone
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # the HTTP port is free again
    assert app.close(5)
    with pytest.raises(StreamsError, match="starts once"):
        app.start()


def test_global_stores_are_queryable_on_every_instance(bootstrap: str, unique_name: str, tmp_path: Path) -> None:
    """Issue 6, item 7: a GlobalKTable's store answers store(name), metadata_for_key and HTTP on each
    instance, for every key (Kafka Streams serves global stores from every instance)."""
    from streaming import StreamsBuilder

    users, clicks = f"{unique_name}-users", f"{unique_name}-clicks"
    create_topics(bootstrap, {users: 3, clicks: 2})
    produce(bootstrap, users, [GeneratedRecord(f"u{i}", f"name-{i}", 1_000 + i) for i in range(20)],
            Serdes.String(), Serdes.String())
    builder = StreamsBuilder()
    builder.global_table(users, key_serde=Serdes.String(), value_serde=Serdes.String(), materialized="users")
    builder.stream(clicks).foreach(lambda k, v: None)
    topology = builder.build()
    ports = [free_port(), free_port()]
    apps = [KafkaStreams(topology, config(bootstrap, unique_name, tmp_path / str(i), port))
            for i, port in enumerate(ports)]
    for app in apps:
        app.start()
    try:
        for app, port in zip(apps, ports, strict=True):
            wait_for(lambda app=app: app.state is State.RUNNING, 60, "the instance to run")
            view = app.store("users")
            assert view.get("u7") == "name-7" and view.get("nobody") is None
            assert dict(view.all()) == {f"u{i}": f"name-{i}" for i in range(20)}
            assert list(view.prefix_scan("u1")) == [("u1", "name-1")] + [(f"u1{i}", f"name-1{i}") for i in range(10)]
            assert view.approximate_num_entries() > 0
            assert app.metadata_for_key("users", "u3").active_host == f"127.0.0.1:{port}"
            status, body = http_get(f"127.0.0.1:{port}", "/stores/users/u3")
            assert (status, body["value"], body["partition"]) == (200, "name-3", None)
            assert http_get(f"127.0.0.1:{port}", "/stores/users/nobody")[0] == 404
    finally:
        for app in apps:
            assert app.close(30)
    with pytest.raises(InvalidStateStoreError, match="NOT_RUNNING"):
        apps[0].store("users").get("u1")
