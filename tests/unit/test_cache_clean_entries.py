"""The record cache's clean entries (streaming.state.caching): what a key-value store's layers below hold, kept after
a flush and after a read went below, on real RocksDB, against a dict model of the store.

Kafka Streams keeps a flushed entry as clean (``NamedCache.flush``) and caches what a miss read
(``CachingKeyValueStore.getInternal``); Brook also caches a miss that found nothing. What must hold whatever the
cache keeps: every read equals the model (the last write, or the changelog records a restore applied), a flush
forwards each key's latest update, and the budget counts exactly the bytes the entries hold.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from streaming import Serdes, Stores
from streaming.state.bytes_store import StoreContext
from streaming.state.caching import ENTRY_OVERHEAD, CacheBudget


def open_store(directory: Path, budget: CacheBudget, name: str = "table") -> Any:
    builder = Stores.key_value_store_builder(Stores.persistent_key_value_store(name), Serdes.String(), Serdes.Long())
    store = builder.with_caching_enabled().with_logging_disabled().build()
    store.init(StoreContext("app", "0_0", str(directory / name), Serdes.String(), Serdes.Long(),
                            timestamp=lambda: 5, cache_budget=budget))
    return store


class Inner:
    """Counts the reads that reach the inner RocksDB store."""

    def __init__(self, store: Any) -> None:
        self.reads = 0
        get = store.inner.get

        def counted(key: bytes) -> bytes | None:
            self.reads += 1
            return get(key)
        store.inner.get = counted


def held_bytes(*stores: Any) -> int:
    """What the budget should count: every dirty and clean entry of ``stores``."""
    total = 0
    for store in stores:
        cache = store._caching.cache
        total += sum(len(k) + ENTRY_OVERHEAD + len(e[0] or b"") for k, e in cache.entries.items())
        total += sum(len(k) + ENTRY_OVERHEAD + len(v or b"") for k, v in cache.clean.items())
    return total


def test_a_flushed_or_read_key_is_read_from_memory_after(tmp_path: Path) -> None:
    store = open_store(tmp_path, CacheBudget(10 << 20))
    inner = Inner(store)
    lookup = store.value_lookup()
    store.put("written", 1)
    store.flush()  # written through, kept as clean
    assert [lookup("written"), lookup("written")] == [1, 1] and inner.reads == 0
    assert [lookup("never"), lookup("never")] == [None, None] and inner.reads == 1  # a miss is cached too
    store.restore_batch([(b"never", (7).to_bytes(8, "big"))])  # the inner store changed below the cache
    assert lookup("never") == 7 and lookup("written") == 1 and inner.reads == 3
    store.close()


def test_a_delete_flushed_reads_as_absent_and_the_old_value_is_forwarded_once(tmp_path: Path) -> None:
    """A flush listener with old values reads the old value from the clean entry; a delete forwards (key, None,
    old) once and later reads find nothing."""
    store = open_store(tmp_path, CacheBudget(10 << 20))
    flushed: list[tuple[Any, Any, Any]] = []
    store.set_flush_listener(lambda key, change, ts, headers: flushed.append((key, *change)), send_old_values=True)
    lookup = store.value_lookup()
    store.put("k", 1)
    store.flush()
    store.put("k", 2)
    store.flush()
    store.delete("k")
    store.flush()
    assert flushed == [("k", 1, None), ("k", 2, 1), ("k", None, 2)]
    assert lookup("k") is None and store.get("k") is None
    store.close()


def test_clean_entries_of_any_store_go_before_a_dirty_entry_is_evicted(tmp_path: Path) -> None:
    """Store a's clean entries fill the budget; store b's writes then drop them rather than write b's own dirty
    entries through early (which would forward them before the commit)."""
    budget = CacheBudget(20 * (ENTRY_OVERHEAD + 16))
    a, b = open_store(tmp_path, budget, "a"), open_store(tmp_path, budget, "b")
    lookup_a = a.value_lookup()
    for n in range(15):
        a.put(f"a{n:02d}", n)
    a.flush()
    assert [lookup_a(f"a{n:02d}") for n in range(15)] == list(range(15))
    forwarded: list[Any] = []
    b.set_flush_listener(lambda key, change, ts, headers: forwarded.append(key))
    for n in range(12):
        b.put(f"b{n:02d}", n)
    assert forwarded == [] and len(b._caching.cache.entries) == 12
    assert len(a._caching.cache.clean) < 15 and budget.used == held_bytes(a, b) <= budget.max_bytes
    a.close()
    b.close()
    assert budget.used == 0 and budget.caches == []


def test_random_reads_writes_restores_and_evictions_match_a_model(tmp_path: Path) -> None:
    """Puts, deletes, per-record reads, flushes and restore batches over 40 keys with a budget of about 12
    entries (so both kinds of eviction happen): every read equals the dict model, what is forwarded is each key's
    latest update, the inner store holds the model after each flush, and the budget counts what the entries hold."""
    rng = random.Random(21)
    budget = CacheBudget(12 * (ENTRY_OVERHEAD + 12))
    store, other = open_store(tmp_path, budget), open_store(tmp_path, budget, "other")
    model: dict[str, int] = {}
    forwarded: dict[str, Any] = {}  # key -> the last update forwarded since the last flush
    store.set_flush_listener(lambda key, change, ts, headers: forwarded.__setitem__(key, change.new))
    lookup, other_lookup = store.value_lookup(), other.value_lookup()
    keys = [f"k{n:02d}" for n in range(40)]

    def flush() -> None:
        """After a flush the inner store holds the model, and each key forwarded since the last flush (or eviction)
        was forwarded with its value now."""
        store.flush()
        assert forwarded == {key: model.get(key) for key in forwarded}
        forwarded.clear()
        inner = {key: store.inner.get(key.encode()) for key in keys}
        assert {key: int.from_bytes(raw, "big") for key, raw in inner.items() if raw is not None} == model

    for step in range(4000):
        op, key = rng.random(), rng.choice(keys)
        if op < 0.35:
            value = rng.randrange(1000)
            store.put(key, value)
            model[key] = value
        elif op < 0.45:
            store.delete(key)
            model.pop(key, None)
        elif op < 0.85:
            assert lookup(key) == model.get(key), (step, key)
        elif op < 0.9:
            other_lookup(key)  # the other store's clean entries compete for the budget
        elif op < 0.97:
            flush()
        else:  # a changelog record restored below the cache (the store holds no dirty entries then)
            flush()
            value = rng.randrange(1000)
            store.restore_batch([(key.encode(), value.to_bytes(8, "big"))])
            model[key] = value
        assert budget.used == held_bytes(store, other), step
    flush()
    assert {key: store.get(key) for key in keys if store.get(key) is not None} == model
    store.close()
    other.close()
    assert budget.used == 0
