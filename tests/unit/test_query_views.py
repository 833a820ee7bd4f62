"""Interactive queries without a broker: store views over fake tasks (routing, merged scans, record-cache
overlay, availability errors), owner selection from announcements, URL key conversion, and the HTTP
endpoint's answers."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any
from urllib.parse import quote

import pytest

from streaming import Serdes, Stores, Topology
from streaming.config import StreamsConfig
from streaming.errors import InvalidStateStoreError, StreamsError, UnknownStateStoreError
from streaming.processor import Processor, Record
from streaming.runtime.http_server import InteractiveQueryServer, jsonable, key_from_text
from streaming.runtime.interactive_queries import InteractiveQueries, KeyQueryMetadata
from streaming.state.bytes_store import overlay
from streaming.runtime.partitioning import partition_for_key
from streaming.runtime.query_metadata import (
    Assignment,
    HostAnnouncement,
    WorkerIdentity,
    decode_announcement,
    encode_announcement,
)
from streaming.serdes import Serde
from streaming.state.caching import CacheBudget
from streaming.state.bytes_store import StoreContext
from streaming.state.memory import InMemoryBytesStore

PARTITIONS = 3
STORE = "s"


class Noop(Processor[Any, Any]):
    def process(self, record: Record[Any, Any]) -> None:
        pass


class Harness:
    """InteractiveQueries over in-memory stores of fake tasks for the given local partitions."""

    def __init__(self, key_serde: Serde[Any] | None = None, caching: bool = False, host: str | None = None,
                 local: tuple[int, ...] = (0, 1, 2), timestamped: bool = False) -> None:
        self.key_serde = key_serde or Serdes.String()
        make = Stores.timestamped_key_value_store_builder if timestamped else Stores.key_value_store_builder
        builder = make(Stores.in_memory_key_value_store(STORE), self.key_serde, Serdes.Json())
        if caching:
            builder.with_caching_enabled()
        self.topology = (Topology().add_source("src", "in").add_processor("p", Noop, "src")
                         .add_state_store(builder, "p"))
        settings: dict[str, Any] = {"application.id": "iq-unit"}
        if host:
            settings["application.server"] = host
        config = StreamsConfig(settings, require_bootstrap=False)
        budget = CacheBudget(10 << 20)
        self.state = "RUNNING"
        self.standby: list[str] = []
        self.tasks = []
        for partition in local:
            store = builder.build()
            store.init(StoreContext("iq-unit", f"0_{partition}", None, config.default_key_serde,
                                    config.default_value_serde, cache_budget=budget))
            self.tasks.append(SimpleNamespace(id=f"0_{partition}", partition=partition, initialized=True,
                                              stores={STORE: store}, partitions=[("in", partition)]))
        self.iq = InteractiveQueries(self.topology, config, {"in": PARTITIONS}, tasks=lambda: list(self.tasks),
                                     standby_task_ids=lambda: self.standby, state=lambda: self.state)

    def partition(self, key: Any) -> int:
        return partition_for_key(self.key_serde.serialize(key), PARTITIONS)

    def store_of(self, key: Any) -> Any:
        partition = self.partition(key)
        return next(t.stores[STORE] for t in self.tasks if t.partition == partition)

    def put(self, key: Any, value: Any) -> None:
        self.store_of(key).put(key, value)


class FakeReader:
    def __init__(self, *announcements: HostAnnouncement) -> None:
        self.latest = {a.host: a for a in announcements}

    def announcements(self) -> dict[str, HostAnnouncement]:
        return dict(self.latest)

    def close(self) -> None:
        pass


def announcement(host: str, offset: int, partitions: tuple[int, ...] = (), standby: tuple[str, ...] = (),
                 server: bool = True) -> HostAnnouncement:
    """An instance's announcement, keyed ``host``: its application.server, or (``server=False``) none."""
    return HostAnnouncement(host, "i-" + host, 1, 0, "RUNNING",
                            Assignment({"in": partitions}, tuple(f"0_{p}" for p in partitions), standby), offset,
                            application_server=host if server else None)


# -- store views ---------------------------------------------------------------------------------------------
def test_get_reads_the_task_the_key_hashes_to_and_none_elsewhere() -> None:
    harness = Harness(local=(0, 1, 2))
    keys = [f"k{i}" for i in range(30)]
    for index, key in enumerate(keys):
        harness.put(key, {"n": index})
    view = harness.iq.store(STORE)
    assert [view.get(key) for key in keys] == [{"n": i} for i in range(30)]
    assert view.get("missing") is None
    moved = harness.partition("k0")
    harness.tasks = [t for t in harness.tasks if t.partition != moved]  # k0's task moved away
    assert view.get("k0") is None
    other = next(i for i, key in enumerate(keys) if harness.partition(key) != moved)
    assert view.get(keys[other]) == {"n": other}


def test_scans_merge_local_tasks_in_serialized_key_order() -> None:
    harness = Harness(key_serde=Serdes.Long())
    numbers = list(range(-5, 6))
    for number in numbers:
        harness.put(number, number * 10)
    view = harness.iq.store(STORE)
    expected = sorted(numbers, key=lambda n: Serdes.Long().serialize(n))  # big-endian: negatives sort last
    assert expected[:6] == [0, 1, 2, 3, 4, 5]
    assert [k for k, _ in view.all()] == expected
    assert list(view.range(1, 4)) == [(n, n * 10) for n in (1, 2, 3, 4)]
    assert list(view.range(3, -1)) == [(n, n * 10) for n in (3, 4, 5, -5, -4, -3, -2, -1)]  # bytes order
    assert list(view.range(-1, 3)) == []  # from > to (serialized): empty, as in Kafka Streams
    assert list(view.range(None, 1)) == [(0, 0), (1, 10)]
    assert view.approximate_num_entries() == len(numbers)


def test_prefix_scan_with_and_without_a_prefix_serde() -> None:
    harness = Harness()
    for key in ("ab", "abc", "abd", "b", "a"):
        harness.put(key, key.upper())
    view = harness.iq.store(STORE)
    assert list(view.prefix_scan("ab")) == [("ab", "AB"), ("abc", "ABC"), ("abd", "ABD")]
    assert list(view.prefix_scan(b"a", Serdes.Bytes())) == [("a", "A"), ("ab", "AB"), ("abc", "ABC"), ("abd", "ABD")]


def test_reads_see_unflushed_cache_writes_without_flushing() -> None:
    harness = Harness(caching=True)
    for key in ("a", "b", "c", "d"):
        harness.put(key, 1)
    for task in harness.tasks:
        task.stores[STORE].flush()
    harness.put("b", 2)  # unflushed update
    harness.put("c", None)  # unflushed delete
    harness.put("e", 5)  # unflushed insert
    view = harness.iq.store(STORE)
    assert list(view.all()) == [("a", 1), ("b", 2), ("d", 1), ("e", 5)]
    assert list(view.range("b", "d")) == [("b", 2), ("d", 1)]
    assert (view.get("b"), view.get("c"), view.get("e")) == (2, None, 5)
    assert sum(len(t.stores[STORE].unflushed()) for t in harness.tasks) == 3, "a read flushed the cache"


@pytest.mark.parametrize("caching", [False, True], ids=["uncached", "cached"])
def test_scans_of_a_timestamped_store_give_plain_values(caching: bool) -> None:
    # Tables, aggregations and join results keep a timestamp with each value; queries show the value.
    harness = Harness(caching=caching, timestamped=True)
    for key, value in (("a", {"n": 1}), ("b", {"n": 2}), ("c", {"n": 3})):
        harness.put(key, value)
    view = harness.iq.store(STORE)
    assert list(view.all()) == [("a", {"n": 1}), ("b", {"n": 2}), ("c", {"n": 3})]
    assert list(view.range("b", "c")) == [("b", {"n": 2}), ("c", {"n": 3})]
    assert list(view.prefix_scan("a")) == [("a", {"n": 1})]
    assert view.get("b") == {"n": 2}


def test_overlay_merges_pending_writes() -> None:
    entries = [(b"b", b"1"), (b"d", b"1"), (b"f", b"1")]
    pending = [(b"a", b"p"), (b"d", None), (b"e", b"p"), (b"f", b"p"), (b"g", None), (b"h", b"p")]
    assert list(overlay(entries, pending)) == [(b"a", b"p"), (b"b", b"1"), (b"e", b"p"), (b"f", b"p"), (b"h", b"p")]
    assert list(overlay(iter(()), [(b"x", None)])) == []


def test_not_running_or_restoring_raises_invalid_state_store() -> None:
    harness = Harness()
    harness.put("k", 1)
    view = harness.iq.store(STORE)
    harness.state = "REBALANCING"  # restored tasks answer during a rebalance (Kafka Streams' KIP-535)
    assert view.get("k") == 1
    assert dict(view.all()) == {"k": 1}
    harness.tasks[harness.partition("k")].initialized = False
    with pytest.raises(InvalidStateStoreError, match=r"tasks \['0_\d'\] are restoring"):
        view.all()  # raised at the call, not at the first next()
    harness.state = "RUNNING"
    with pytest.raises(InvalidStateStoreError, match=r"tasks \['0_\d'\] are restoring"):
        view.get("k")
    with pytest.raises(InvalidStateStoreError, match="restoring"):
        view.approximate_num_entries()
    harness.state = "PENDING_SHUTDOWN"
    with pytest.raises(InvalidStateStoreError, match="PENDING_SHUTDOWN"):
        view.get("k")


def test_a_store_closed_under_a_read_is_invalid_state() -> None:
    harness = Harness()
    store = harness.store_of("k")

    def closed_get(key: Any) -> Any:
        store.inner.is_open = False
        raise RuntimeError("state store 's' is closed")

    store.get = closed_get
    with pytest.raises(InvalidStateStoreError, match="closed during the query"):
        harness.iq.store(STORE).get("k")


def test_unknown_store_names_the_known_ones() -> None:
    harness = Harness()
    with pytest.raises(UnknownStateStoreError, match="no queryable state store 'nope'.*known key-value stores: 's'"):
        harness.iq.store("nope")


def test_in_memory_scan_never_trusts_a_key_list_sorted_before_an_insert() -> None:
    store = InMemoryBytesStore("m")
    store.put(b"a", b"1")
    list(store.range(None, None))
    sorted_by_a_reader = store._sorted  # a query thread sorted the keys...
    store.put(b"b", b"2")  # ...the stream thread inserted...
    store._sorted = sorted_by_a_reader  # ...and the reader's cache write landed late
    assert [k for k, _ in store.range(None, None)] == [b"a", b"b"]
    store.put(b"a", None)  # a delete
    assert [k for k, _ in store.prefix(b"")] == [b"b"]


# -- metadata --------------------------------------------------------------------------------------------------
def test_metadata_picks_the_latest_claim_and_lists_standbys() -> None:
    harness = Harness(host="h1:1")
    harness.iq._reader = FakeReader(announcement("h1:1", 3, (0, 1)), announcement("h2:2", 9, (1, 2)),
                                     announcement("h3:3", 4, (), standby=("0_1", "0_2")))
    key = next(k for k in (f"k{i}" for i in range(100)) if harness.partition(k) == 1)
    # h1's claim is older (a revocation it has not announced yet): h2 wins; h3 keeps a standby copy
    assert harness.iq.metadata_for_key(STORE, key) == KeyQueryMetadata("h2:2", ["h3:3"], 1)
    harness.iq._reader = FakeReader(announcement("h1:1", 3, (0,)))
    assert harness.iq.metadata_for_key(STORE, key) == KeyQueryMetadata(None, [], 1)


def test_metadata_routes_only_to_instances_with_an_application_server() -> None:
    """Issue 17, item 1: every instance announces itself, but one without application.server cannot be asked."""
    harness = Harness(host="h1:1")
    key = next(k for k in (f"k{i}" for i in range(100)) if harness.partition(k) == 1)
    harness.iq._reader = FakeReader(announcement("h1:1", 3, (0, 1)), announcement("instance-ab", 9, (1,), ("0_1",),
                                                                                  server=False))
    assert harness.iq.metadata_for_key(STORE, key) == KeyQueryMetadata("h1:1", [], 1)


def test_metadata_with_a_key_serde_or_partitioner() -> None:
    harness = Harness(host="h1:1")
    harness.iq._reader = FakeReader(announcement("h1:1", 3, (0, 1, 2)))
    as_bytes = harness.iq.metadata_for_key(STORE, b"abc", key_serde=Serdes.Bytes())
    assert as_bytes.partition == partition_for_key(b"abc", PARTITIONS)
    assert harness.iq.metadata_for_key(STORE, "x", partitioner=lambda topic, key, value, n: n - 1).partition == 2
    with pytest.raises(StreamsError, match="returned 7"):
        harness.iq.metadata_for_key(STORE, "x", partitioner=lambda topic, key, value, n: 7)


def test_metadata_needs_application_server() -> None:
    with pytest.raises(StreamsError, match="application.server"):
        Harness().iq.metadata_for_key(STORE, "k")


def test_announcements_round_trip() -> None:
    assignment = Assignment({"in": (0, 2)}, ("0_0", "0_2"), ("0_1",))
    server = WorkerIdentity("h:1", "box-1", 42, "w1", "abc")
    data = encode_announcement(server, 7, "RUNNING", assignment, timestamp=123)
    assert decode_announcement(data, 42, 5_000) == HostAnnouncement(
        "h:1", "abc", 7, 123, "RUNNING", assignment, 42, application_server="h:1", hostname="box-1", pid=42,
        instance_name="w1", record_timestamp=5_000)
    plain = WorkerIdentity(None, "box-2", 43, None, "def")
    decoded = decode_announcement(encode_announcement(plain, 1, "RUNNING", assignment, timestamp=1), 0)
    assert (decoded.host, decoded.application_server, decoded.describe()) == (
        "instance-def", None, "instance-def (host box-2, pid 43)")
    with pytest.raises(ValueError, match="version-1"):
        decode_announcement(b'{"version": 99}', 0)


def test_announcements_written_before_every_instance_announced_are_read() -> None:
    """Version-1 announcements without the identity fields came only from instances with application.server."""
    old = (b'{"version": 1, "host": "h:1", "instance": "abc", "sequence": 3, "timestamp": 9, "state": "RUNNING", '
           b'"active": {"in": [1]}, "active_tasks": ["0_1"], "standby_tasks": []}')
    decoded = decode_announcement(old, 7)
    assert (decoded.application_server, decoded.hostname, decoded.pid, decoded.describe()) == ("h:1", None, None,
                                                                                               "h:1")


def test_assignment_snapshot_of_local_tasks() -> None:
    harness = Harness(local=(0, 2))
    harness.standby = ["0_1"]
    assert harness.iq.assignment() == (Assignment({"in": (0, 2)}, ("0_0", "0_2"), ("0_1",)), "RUNNING")


# -- URL keys and JSON values ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "serde", "expected"), [
    ("user 1/2", Serdes.String(), "user 1/2"),
    ("-42", Serdes.Integer(), -42),
    ("9007199254740993", Serdes.Long(), 9007199254740993),
    ("2.5", Serdes.Double(), 2.5),
    ('{"id": 1}', Serdes.Json(), {"id": 1}),
    ('"u1"', Serdes.Json(), "u1"),
    ("raw", Serdes.Bytes(), b"raw"),
])
def test_key_from_text(text: str, serde: Serde[Any], expected: Any) -> None:
    assert key_from_text(text, serde) == expected


@pytest.mark.parametrize(("text", "serde", "message"), [
    ("1.5", Serdes.Integer(), "decimal integer"),
    ("2147483648", Serdes.Integer(), "out of range"),
    ("9223372036854775808", Serdes.Long(), "out of range"),
    ("x", Serdes.Double(), "number"),
    ("{bad", Serdes.Json(), "JSON"),
    ("k", Serdes.from_functions(str.encode, bytes.decode), "cannot be given in a URL"),
])
def test_key_from_text_rejects(text: str, serde: Serde[Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        key_from_text(text, serde)


def test_jsonable() -> None:
    assert jsonable({"a": [1, 2.5, None]}) == ({"a": [1, 2.5, None]}, None)
    assert jsonable(b"\x00\xff") == ("AP8=", "base64")
    value, flag = jsonable(object())
    assert flag == "repr" and value.startswith("<object")


# -- the HTTP endpoint -------------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get(host: str, path: str) -> tuple[int, dict[str, Any], Any]:
    try:
        with urllib.request.urlopen(f"http://{host}{path}", timeout=5) as response:
            return response.status, json.loads(response.read()), response.headers
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read()), error.headers


@pytest.fixture
def served() -> Iterator[tuple[Harness, str]]:
    host = f"127.0.0.1:{free_port()}"
    harness = Harness(host=host, local=(0, 1))
    harness.iq._reader = FakeReader(announcement(host, 1, (0, 1)), announcement("other:9", 2, (2,)))
    server = InteractiveQueryServer(harness.iq, host)
    server.start()
    try:
        yield harness, host
    finally:
        server.stop()


def key_in(harness: Harness, partition: int, prefix: str = "k") -> str:
    return next(k for k in (f"{prefix}{i}" for i in range(1000)) if harness.partition(k) == partition)


def test_http_answers_local_keys_missing_keys_and_unknown_stores(served: tuple[Harness, str]) -> None:
    harness, host = served
    key = key_in(harness, 0, "user/")
    harness.put(key, {"total": 3})
    assert get(host, f"/stores/{STORE}/{quote(key, safe='')}")[:2] == (
        200, {"store": STORE, "key": key, "value": {"total": 3}, "partition": 0, "host": host})
    status, body, _ = get(host, f"/stores/{STORE}/{key_in(harness, 1)}")
    assert (status, body["error"], body["partition"]) == (404, "not found", 1)
    status, body, _ = get(host, "/stores/nope/k")
    assert (status, body) == (404, {"error": "unknown store", "store": "nope", "known_stores": [STORE]})
    assert get(host, "/nowhere")[0] == 404
    status, body, _ = get(host, "/health")
    assert (status, body["state"], body["active_tasks"]) == (200, "RUNNING", ["0_0", "0_1"])


def test_http_sends_misdirected_requests_to_the_owner(served: tuple[Harness, str]) -> None:
    harness, host = served
    key = key_in(harness, 2)
    status, body, _ = get(host, f"/stores/{STORE}/{key}")
    assert status == 421
    assert body == {"error": "not local", "owner": "other:9", "store": STORE, "key": key, "partition": 2,
                    "url": f"http://other:9/stores/{STORE}/{key}"}


def test_http_unavailable_while_rebalancing_or_unowned(served: tuple[Harness, str]) -> None:
    harness, host = served
    harness.state = "REBALANCING"
    harness.tasks[0].initialized = False  # partition 0's task is restoring
    status, body, headers = get(host, f"/stores/{STORE}/{key_in(harness, 0)}")
    assert (status, body["error"], headers["Retry-After"]) == (503, "unavailable", "1")
    assert "restoring" in body["reason"]
    harness.iq._reader = FakeReader(announcement(host, 1, (0, 1)))  # nobody claims partition 2
    status, body, _ = get(host, f"/stores/{STORE}/{key_in(harness, 2)}")
    assert status == 503 and "no instance owns partition 2" in body["reason"]
    harness.state = "ERROR"
    assert get(host, "/health")[:2][0] == 503


def test_http_converts_keys_by_the_store_key_serde() -> None:
    long_harness = Harness(key_serde=Serdes.Long(), host="127.0.0.1:1")
    server = InteractiveQueryServer(long_harness.iq, f"127.0.0.1:{free_port()}")
    server.start()
    try:
        status, body, _ = get(server.address, f"/stores/{STORE}/abc")
        assert (status, body["error"]) == (400, "bad key")
        long_harness.put(7, "seven")
        assert get(server.address, f"/stores/{STORE}/7")[1]["value"] == "seven"
    finally:
        server.stop()


def test_http_port_in_use_is_a_clear_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        address = f"127.0.0.1:{sock.getsockname()[1]}"
        with pytest.raises(StreamsError, match="cannot serve HTTP on application.server"):
            InteractiveQueryServer(Harness().iq, address).start()


def test_http_needs_a_real_port() -> None:
    with pytest.raises(StreamsError, match="needs a port in 1-65535"):
        InteractiveQueryServer(Harness().iq, "127.0.0.1:0")
