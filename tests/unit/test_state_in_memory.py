"""The in-memory key-value store, through its public KeyValueStore API."""

from __future__ import annotations

from typing import Any

import pytest

from streaming import KeyValueStore, Serdes, Stores
from streaming.dsl.value_getters import ABSENT
from streaming.state.bytes_store import StoreContext
from streaming.state.caching import CacheBudget
from streaming.state.changelogging import ChangeLogger


def open_store(key_serde: Any = None, value_serde: Any = None, name: str = "kv") -> KeyValueStore:
    builder = Stores.key_value_store_builder(Stores.in_memory_key_value_store(name), key_serde, value_serde)
    store = builder.build()
    store.init(StoreContext("app", "0_0", None, Serdes.String(), Serdes.Json()))
    return store


@pytest.fixture
def store() -> KeyValueStore:
    return open_store(Serdes.String(), Serdes.Long())


def test_get_put(store: KeyValueStore) -> None:
    assert store.get("a") is None
    store.put("a", 1)
    store.put("b", 2)
    store.put("a", 3)
    assert store.get("a") == 3 and store.get("b") == 2
    assert store.approximate_num_entries() == 2


def test_put_none_deletes(store: KeyValueStore) -> None:
    store.put("a", 1)
    store.put("a", None)
    assert store.get("a") is None
    assert list(store.all()) == []
    assert store.approximate_num_entries() == 0
    store.put("never-there", None)  # no error
    assert store.approximate_num_entries() == 0


def test_put_if_absent(store: KeyValueStore) -> None:
    assert store.put_if_absent("a", 1) is None
    assert store.get("a") == 1
    assert store.put_if_absent("a", 2) == 1
    assert store.get("a") == 1


def test_delete_returns_the_old_value(store: KeyValueStore) -> None:
    store.put("a", 10)
    assert store.delete("a") == 10
    assert store.get("a") is None
    assert store.delete("a") is None


def test_put_all(store: KeyValueStore) -> None:
    store.put("c", 3)
    store.put_all([("a", 1), ("b", 2), ("c", None)])
    assert list(store.all()) == [("a", 1), ("b", 2)]


def test_none_keys_are_refused(store: KeyValueStore) -> None:
    with pytest.raises(ValueError, match="keys may not be None"):
        store.put(None, 1)
    with pytest.raises(ValueError, match="keys may not be None"):
        store.get(None)


def test_value_lookup_reads_like_get_with_the_given_absent_value() -> None:
    plain = open_store(Serdes.String(), Serdes.Json())
    builder = Stores.timestamped_key_value_store_builder(Stores.in_memory_key_value_store("ts"), Serdes.String(),
                                                         Serdes.Json())
    timestamped = builder.build()
    timestamped.init(StoreContext("app", "0_0", None, Serdes.String(), Serdes.Json()))
    missing = object()
    for store in (plain, timestamped):
        lookup, lookup_or_missing = store.value_lookup(), store.value_lookup(missing)
        store.put("a", {"n": 1})
        assert lookup("a") == store.get("a") == {"n": 1}
        assert lookup("b") is None and lookup_or_missing("b") is missing
        store.delete("a")  # a lookup sees every write at once
        assert lookup_or_missing("a") is missing
        with pytest.raises(ValueError, match="keys may not be None"):
            lookup(None)


def test_range_includes_both_ends(store: KeyValueStore) -> None:
    for index, key in enumerate(["a", "b", "c", "d", "e"]):
        store.put(key, index)
    assert list(store.range("b", "d")) == [("b", 1), ("c", 2), ("d", 3)]
    assert list(store.range("b", "b")) == [("b", 1)]
    assert list(store.range("bb", "cc")) == [("c", 2)]  # ends need not exist
    assert list(store.range("d", "b")) == []  # from > to: empty, as Kafka Streams
    assert list(store.range(None, "b")) == [("a", 0), ("b", 1)]
    assert list(store.range("d", None)) == [("d", 3), ("e", 4)]
    assert [k for k, _ in store.range(None, None)] == ["a", "b", "c", "d", "e"]


def test_all_is_in_serialized_key_order() -> None:
    # Integer keys are big-endian two's complement: negative numbers sort AFTER positive ones by bytes.
    store = open_store(Serdes.Integer(), Serdes.String())
    for key in [5, -1, 300, 0, 2, -100]:
        store.put(key, str(key))
    assert [k for k, _ in store.all()] == [0, 2, 5, 300, -100, -1]
    assert [k for k, _ in store.range(2, 300)] == [2, 5, 300]
    strings = open_store(Serdes.String(), Serdes.Long())
    for key in ["b", "B", "a", "ab", "é", "A"]:
        strings.put(key, 1)
    assert [k for k, _ in strings.all()] == ["A", "B", "a", "ab", "b", "é"]


def test_prefix_scan(store: KeyValueStore) -> None:
    for key in ["user:1", "user:10", "user:2", "users", "item:1", "use"]:
        store.put(key, len(key))
    assert [k for k, _ in store.prefix_scan("user:")] == ["user:1", "user:10", "user:2"]
    assert [k for k, _ in store.prefix_scan("user")] == ["user:1", "user:10", "user:2", "users"]
    assert list(store.prefix_scan("zzz")) == []
    assert [k for k, _ in store.prefix_scan("")] == [k for k, _ in store.all()]


def test_prefix_scan_with_a_prefix_serde() -> None:
    store = open_store(Serdes.Long(), Serdes.String())
    for key in [1, 2, 256, 2**40]:
        store.put(key, str(key))
    # keys 1, 2 and 256 share their first 6 bytes (zeros) with each other, not with 2**40
    assert [k for k, _ in store.prefix_scan(b"\x00" * 6, prefix_key_serde=Serdes.Bytes())] == [1, 2, 256]


def test_iterators_are_snapshots(store: KeyValueStore) -> None:
    for key in ["a", "b", "c"]:
        store.put(key, 1)
    seen = []
    for key, value in store.all():
        seen.append(key)
        store.put("z", 9)  # added during iteration: not seen by this iterator
    assert seen == ["a", "b", "c"]
    assert [k for k, _ in store.all()] == ["a", "b", "c", "z"]


def test_iteration_skips_keys_deleted_meanwhile(store: KeyValueStore) -> None:
    for key in ["a", "b", "c"]:
        store.put(key, 1)
    iterator = store.all()
    assert next(iterator) == ("a", 1)
    store.delete("b")
    assert list(iterator) == [("c", 1)]


def test_values_use_the_value_serde() -> None:
    store = open_store(Serdes.String(), Serdes.Json())
    store.put("k", {"a": [1, 2]})
    assert store.get("k") == {"a": [1, 2]}
    assert store.inner.get(b"k") == b'{"a":[1,2]}'


def test_default_serdes_come_from_the_context() -> None:
    store = open_store()  # no serdes given: the context's String / Json
    store.put("k", [1])
    assert store.inner.get(b"k") == b"[1]"


def test_approximate_num_entries_counts_live_keys(store: KeyValueStore) -> None:
    for index in range(100):
        store.put(f"k{index:03d}", index)
    for index in range(0, 100, 2):
        store.delete(f"k{index:03d}")
    assert store.approximate_num_entries() == 50
    assert len(list(store.all())) == 50


def test_lifecycle(store: KeyValueStore) -> None:
    assert store.name == "kv"
    assert store.persistent is False
    assert store.is_open
    store.flush()
    store.close()
    assert not store.is_open


def test_builder_options() -> None:
    builder = Stores.key_value_store_builder(Stores.in_memory_key_value_store("s"))
    assert builder.logging_enabled and not builder.caching_enabled
    assert builder.with_logging_disabled() is builder and not builder.logging_enabled
    builder.with_logging_enabled({"retention.ms": "1000"}).with_caching_enabled()
    assert builder.logging_enabled and builder.log_config == {"retention.ms": "1000"} and builder.caching_enabled
    assert builder.build() is not builder.build()  # one store per task


class _Sent:
    """A record collector that keeps what the change-logging layer sends."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes | None, bytes | None]] = []

    def send(self, topic: str, key: bytes | None, value: bytes | None, timestamp: int, headers: Any,
             partition: int = -1) -> None:
        self.sent.append((topic, key, value))


@pytest.mark.parametrize(("logging", "caching"), [(False, False), (True, False), (False, True), (True, True)])
def test_the_per_record_reads_see_every_layer_as_get_does(logging: bool, caching: bool) -> None:
    """``value_lookup`` and ``timestamped_access`` read past the change-logging layer and, over a cache, look in its
    entries first: a cached write, a flushed one and a cached delete read as ``get`` reads them."""
    builder = Stores.timestamped_key_value_store_builder(Stores.in_memory_key_value_store("layers"),
                                                         Serdes.String(), Serdes.Json())
    builder = builder.with_logging_enabled() if logging else builder.with_logging_disabled()
    if caching:
        builder.with_caching_enabled()
    store = builder.build()
    collector = _Sent()
    store.init(StoreContext("app", "0_0", None, Serdes.String(), Serdes.Json(),
                            changelogger=lambda name: ChangeLogger(collector, f"app-{name}-changelog", 0),
                            timestamp=lambda: 5, cache_budget=CacheBudget(10 << 20)))
    lookup, missing = store.value_lookup(ABSENT), ABSENT
    key_bytes, get_at, put_at = store.timestamped_access()
    put_at(key_bytes("a"), {"n": 1}, 7, None)
    assert lookup("a") == store.get("a") == {"n": 1} and get_at(key_bytes("a")) == ({"n": 1}, 7)
    store.flush()
    assert lookup("a") == {"n": 1} and get_at(key_bytes("a")) == store.get_with_timestamp("a") == ({"n": 1}, 7)
    put_at(key_bytes("a"), None, 8, None)
    assert lookup("a") is missing and get_at(key_bytes("a")) is None and store.get("a") is None
    store.flush()
    assert lookup("a") is missing and get_at(key_bytes("a")) is None
    assert [key for _, key, _ in collector.sent] == ([b"a", b"a"] if logging else [])


def test_the_changelog_takes_a_batch_as_it_comes_and_a_single_write_at_the_flush() -> None:
    """``put`` is logged write-behind (the latest per key, at the flush); ``put_all`` (a record cache's write-through)
    at once. A key's single write still waiting when a batch writes it again is not logged after the batch: the
    changelog's last record of each key is the store's value."""
    from streaming.state.changelogging import ChangeLoggingBytesStore
    from streaming.state.memory import InMemoryBytesStore

    collector = _Sent()
    store = ChangeLoggingBytesStore(InMemoryBytesStore("kv"), ChangeLogger(collector, "app-kv-changelog", 0),
                                    timestamped=False)
    store.open(None)
    store.put(b"a", b"1", 1)
    store.put(b"b", b"1", 1)
    store.put(b"a", b"2", 2)
    assert collector.sent == []
    store.put_all([(b"a", b"3", 3, None), (b"c", b"1", 3, None)])
    assert collector.sent == [("app-kv-changelog", b"a", b"3"), ("app-kv-changelog", b"c", b"1")]
    store.log_only([(b"d", None, 4, None)])
    store.flush()
    assert collector.sent[2:] == [("app-kv-changelog", b"d", None), ("app-kv-changelog", b"b", b"1")]
    assert store.get(b"a") == b"3" and store.get(b"d") is None
