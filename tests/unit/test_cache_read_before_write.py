"""A window store's record cache keeps what a read-before-write found below it (``CachingBytesStore.read_below``,
``TimestampedTypedWindowStore.owned_updater``) and forwards it as the flush's old value, on real RocksDB.

The rule is Kafka Streams' (``CachingWindowStore.putAndMaybeForward``): a flushed window is forwarded with the value
the store held before the flush as its old value (a suppress downstream asks for old values). Brook reads it once, at
the window aggregate's read, instead of again at the flush. What must hold whatever the cache remembers: every old
value forwarded equals a dict model of what the layers below held (puts with and without a read before, flushes,
evictions of a tiny budget, restores below the cache), and a window read before its write is not read below again.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from streaming import Serdes, Windowed
from streaming.dsl.change import Change
from streaming.state.bytes_store import StoreContext
from streaming.state.caching import ENTRY_OVERHEAD, CacheBudget
from streaming.state.stores import Stores
from tests.unit.test_cache_clean_entries import Inner

SIZE = 10_000


class Step:
    """A window aggregate's step (a count) that records the old aggregate it was given; with ``fail`` it raises after
    that, as an aggregator that failed."""

    def __init__(self) -> None:
        self.seen: list[Any] = []
        self.fail = False

    def __call__(self, key: Any, value: Any, old: Any) -> Any:
        self.seen.append(old)
        if self.fail:
            raise Failed
        return (0 if old is None else old) + 1


class Failed(Exception):
    pass


def open_store(directory: Path, budget: CacheBudget) -> Any:
    builder = Stores.window_store_builder(Stores.persistent_window_store("w", 10 * SIZE, SIZE), Serdes.String(),
                                          Serdes.Long())
    store = builder.with_caching_enabled().with_logging_disabled().build()
    store.init(StoreContext("app", "0_0", str(directory / "w"), Serdes.String(), Serdes.Long(), timestamp=lambda: 5,
                            cache_budget=budget))
    return store


def test_a_window_read_before_its_write_is_not_read_again_at_the_flush(tmp_path: Path) -> None:
    store = open_store(tmp_path, CacheBudget(10 << 20))
    flushed: list[tuple[Windowed, Any, Any]] = []
    store.set_flush_listener(lambda key, change, ts, headers: flushed.append((key.key, *change)), True)
    step = Step()
    inner, update, raw = Inner(store), store.owned_updater(step), store.key_bytes("k")
    update("k", raw, None, 5, 0, None)
    store.flush()
    assert step.seen == [None] and flushed == [("k", 1, None)] and inner.reads == 1  # the read before the write only
    update("k", raw, None, 5, 0, None)
    update("k", raw, None, 5, 0, None)  # a second write of the dirty window keeps what the first one's read found
    store.flush()
    assert step.seen == [None, 1, 2] and flushed[1:] == [("k", 3, 1)] and inner.reads == 2
    store.close()


def test_a_restore_below_the_cache_between_the_read_and_the_flush_is_seen(tmp_path: Path) -> None:
    """A write without a read before it, or one after the layers below changed, reads the old value at the flush."""
    store = open_store(tmp_path, CacheBudget(10 << 20))
    flushed: list[tuple[Any, Any, Any]] = []
    store.set_flush_listener(lambda key, change, ts, headers: flushed.append((key.key, *change)), True)
    step = Step()
    update, raw = store.owned_updater(step), store.key_bytes("k")
    update("k", raw, None, 5, 0, None)  # read below (None), then written
    store.restore_batch([(raw + (0).to_bytes(8, "big") + bytes(4), (9).to_bytes(8, "big"), 5)])
    step.fail = True
    with pytest.raises(Failed):
        update("k", raw, None, 5, SIZE, None)  # read, then another window written: the read is not that write's
    store.put_serialized(raw, 4, 5, 0)  # a write with no read before it, after the layers below changed
    store.flush()
    assert step.seen == [None, None] and flushed == [("k", 4, 9)]
    store.close()


def test_random_reads_writes_evictions_and_restores_forward_the_old_values_of_a_model(tmp_path: Path) -> None:
    """Window aggregates' read-then-write, writes with no read before, flushes, restores below the cache and a budget
    of about 8 entries (evictions write through between a read and its flush): each forwarded old value is what the
    model says the layers below held, and each new value is the last write."""
    rng = random.Random(7)
    budget = CacheBudget(8 * (ENTRY_OVERHEAD + 40))
    store = open_store(tmp_path, budget)
    below: dict[tuple[str, int], int] = {}  # what the layers below hold
    latest: dict[tuple[str, int], int] = {}  # the last write (what reads see)
    forwarded: list[tuple[tuple[str, int], Any, Any, Any]] = []  # (window, new, old, the model's old)

    def on_flush(key: Windowed, change: Change, timestamp: int, headers: Any) -> None:
        new, old = change
        window = (key.key, key.window.start)
        forwarded.append((window, new, old, below.get(window)))
        below[window] = new

    store.set_flush_listener(on_flush, True)
    step = Step()
    update, put = store.owned_updater(step), store.put_serialized  # numbers are cached as objects
    keys = [f"k{n}" for n in range(6)]
    for n in range(3000):
        op, key, start = rng.random(), rng.choice(keys), rng.randrange(4) * SIZE
        raw = store.key_bytes(key)
        if op < 0.55:  # a window aggregate: read the window, write it
            step.fail = False
            update(key, raw, None, 5, start, None)
            assert step.seen[-1] == latest.get((key, start)), n
            latest[(key, start)] = latest.get((key, start), 0) + 1
        elif op < 0.6:  # a window aggregate whose aggregator failed: read, no write
            step.fail = True
            with pytest.raises(Failed):
                update(key, raw, None, 5, start, None)
            assert step.seen[-1] == latest.get((key, start)), n
        elif op < 0.75:  # a write with no read before it
            value = rng.randrange(100)
            put(raw, value, 5, start)
            latest[(key, start)] = value
        elif op < 0.95:
            store.flush()
            assert not store._caching._below  # what a read found below never outlives a commit
        else:  # a changelog record restored below the cache (a dirty entry of its window stays the newer value)
            value, store_key = rng.randrange(100), raw + start.to_bytes(8, "big") + bytes(4)
            store.restore_batch([(store_key, value.to_bytes(8, "big"), 5)])
            below[(key, start)] = value
            if store._caching.cache.get(store_key) is None:
                latest[(key, start)] = value
    store.flush()
    assert len(forwarded) > 500
    assert [(window, old) for window, _, old, _ in forwarded] == [(window, model) for window, _, _, model in forwarded]
    assert below == latest == {(w.key, w.window.start): v for w, v in store.all()}
    store.close()
