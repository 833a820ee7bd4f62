"""The pure steps of a migration, per partition and per record, for the Spark job to run and the tests to check.

- **Copy** (:func:`repartition`): the records of an input, intermediate or repartition topic's ``M`` partitions
  into ``N``, each to ``murmur2(key) % N`` (:func:`~streaming.runtime.partitioning.partition_for_key`, what a
  producer with Kafka's partitioner would choose). Records of one key come from one old partition, so keeping each
  old partition's offset order keeps every key's order. Where a new partition receives records of several old
  partitions (scaling down, or to a count that is not a multiple), it takes the one with the lowest timestamp next
  (:func:`copy_order`), as a task picks across its partitions (Kafka Streams' ``PartitionGroup``), so a
  reprocessing of the new generation meets about the disorder the old tasks met. A record with a null key has no
  partition of its own (producers spread them): it goes to ``old partition % N``.
- **Re-shard** (:func:`reshard_store`): a store's changelog compacted (:func:`compact`: the last record per key; a
  tombstone drops the key), each key to the partition of its record key (:func:`~streaming.scaling.store_keys.
  partition_key_function`), in serialized-key order as a snapshot lists it. A foreign-key subscription store whose
  left side is re-sharded gets the left partition in its values rewritten.
- **Replicate** (:func:`replicate_store`): a store whose keys are not record keys (a Processor API store the
  operator marks ``replicate``): each live entry of old partition ``p`` to every new partition that receives keys of
  ``p`` (:func:`partition_targets`), so whichever task a record of that entry's key goes to finds it.
- **Verify** (:func:`digest`, :func:`misplaced`): per store, the key count and the sum of
  :func:`~streaming.state.snapshots.row_checksum` (the snapshots' own checksum, which Spark computes too) equal
  before and after; every key in the partition its record key hashes to, and in one partition only.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from math import gcd
from typing import NamedTuple

from streaming.runtime.partitioning import partition_for_key
from streaming.scaling.store_keys import StoreKind, partition_key_function, subscription_with_left_partition
from streaming.state.snapshots import row_checksum

__all__ = ["Digest", "Record", "compact", "copy_order", "digest", "interleave", "misplaced", "partition_targets",
           "repartition", "replicas", "replicate_store", "reshard_store", "with_left_partition"]


class Record(NamedTuple):
    """A Kafka record as the copy carries it: key and value bytes (None: null), timestamp, headers. A named tuple:
    a migration builds one per record, and a tuple is built ~2x faster than a frozen dataclass."""

    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: tuple[tuple[str, bytes | None], ...] = ()


def interleave(partitions: Sequence[Iterable[Record]]) -> Iterator[tuple[int, Record]]:
    """``(old partition, record)`` of every record, each partition's in its order, the one whose next record has
    the lowest timestamp first (ties: the lower partition), as ``PartitionGroup`` picks."""
    iterators = [iter(records) for records in partitions]
    heap: list[tuple[int, int, Record]] = []
    for index, records in enumerate(iterators):
        first = next(records, None)
        if first is not None:
            heap.append((first.timestamp, index, first))
    heapq.heapify(heap)
    while heap:
        _, index, record = heap[0]
        following = next(iterators[index], None)
        if following is None:
            heapq.heappop(heap)
        else:
            heapq.heapreplace(heap, (following.timestamp, index, following))
        yield index, record


def copy_order(by_old: Mapping[int, Sequence[Record]]) -> list[Record]:
    """The records one new partition receives, from each old partition that feeds it (old partition -> its records
    for the new one, in offset order), in the order the copy writes them (module doc)."""
    if len(by_old) == 1:
        return list(next(iter(by_old.values())))
    return [record for _, record in interleave([by_old[p] for p in sorted(by_old)])]


def repartition(partitions: Sequence[Iterable[Record]], new: int) -> list[list[Record]]:
    """The records of ``partitions`` (old partition -> records in offset order) in ``new`` partitions (module doc);
    the length of each list is the end offset of the new partition, which the group's offsets are committed at."""
    if new < 1:
        raise ValueError(f"a topic has 1 or more partitions, got {new}")
    placed: list[dict[int, list[Record]]] = [{} for _ in range(new)]
    for old, records in enumerate(partitions):
        for record in records:
            target = old % new if record.key is None else partition_for_key(record.key, new)
            placed[target].setdefault(old, []).append(record)
    return [copy_order(by_old) if by_old else [] for by_old in placed]


def compact(partitions: Mapping[int, Iterable[Record]]) -> list[Record]:
    """A store's live records from its changelog (old partition -> records in offset order; a snapshot's rows
    first, then the tail): the last record per key, tombstones dropped, in key order.

    Raises:
        ValueError: a record without a key, or a changelog key in two old partitions (the state was split:
            re-sharding would pick one at random).
    """
    latest: dict[bytes, Record] = {}
    home: dict[bytes, int] = {}
    for old, records in partitions.items():
        for record in records:
            if record.key is None:
                raise ValueError(f"a changelog record without a key in partition {old}")
            seen = home.setdefault(record.key, old)
            if seen != old:
                raise ValueError(f"changelog key {record.key[:60]!r} is in partitions {seen} and {old}: a store's key "
                                 f"belongs to one task")
            latest[record.key] = record
    return [latest[key] for key in sorted(latest) if latest[key].value is not None]


def with_left_partition(record: Record, left_partitions: int) -> Record:
    """A foreign-key subscription store's live record with its value naming the left row's partition among
    ``left_partitions`` (the left side re-sharded)."""
    key, value = record.key, record.value
    if key is None or value is None:
        raise ValueError(f"a store's live record has a key and a value, got {record!r}")
    left_key = key[4 + len(partition_key_function(StoreKind.FK_SUBSCRIPTION)(key)):]
    return Record(key, subscription_with_left_partition(value, partition_for_key(left_key, left_partitions)),
                  record.timestamp, record.headers)


def reshard_store(partitions: Mapping[int, Iterable[Record]], kind: StoreKind | str, new: int, *,
                  left_partitions: int | None = None) -> dict[int, list[Record]]:
    """A store's state in ``new`` partitions: its live records (:func:`compact`) per new partition in key order,
    each with the timestamp and headers of its last changelog record (a timestamped store restores the value's
    timestamp from it). ``left_partitions``: for a foreign-key subscription store, the left side's new partition
    count (its values then name the left row's new partition: :func:`with_left_partition`).

    Raises:
        ValueError: as :func:`compact`, a key too short for ``kind``, or ``left_partitions`` for another kind.
    """
    if left_partitions is not None and StoreKind(kind) != StoreKind.FK_SUBSCRIPTION:
        raise ValueError(f"left_partitions applies to a foreign-key subscription store, not a {kind} store")
    record_key = partition_key_function(kind)
    result: dict[int, list[Record]] = {p: [] for p in range(new)}
    for record in compact(partitions):
        if left_partitions is not None:
            record = with_left_partition(record, left_partitions)
        result[partition_for_key(record_key(record.key), new)].append(record)  # type: ignore[arg-type]
    return result


def partition_targets(old: int, new: int) -> dict[int, list[int]]:
    """For each of ``old`` partitions, the ones of ``new`` its keys hash to (up or down): a key with ``murmur2 % old
    == p`` has ``murmur2 % new ≡ p (mod gcd(old, new))``, and every such partition receives some (Chinese
    remainder theorem: murmur2 takes every value below 2^31, far above ``old * new``)."""
    if old < 1 or new < 1:
        raise ValueError(f"partition counts are 1 or more, got {old} -> {new}")
    step = gcd(old, new)
    return {p: list(range(p % step, new, step)) for p in range(old)}


def replicas(by_old: Mapping[int, Iterable[Record]]) -> list[Record]:
    """The records one new partition receives from a replicated store (module doc): the live records (last record
    per key, tombstones dropped) of each old partition that feeds it (old partition -> its changelog in offset
    order), in key order; a key live in several of them takes the value of the highest old partition.

    Raises:
        ValueError: a record without a key.
    """
    result: dict[bytes, Record] = {}
    for source in sorted(by_old):
        latest: dict[bytes, Record] = {}
        for record in by_old[source]:
            if record.key is None:
                raise ValueError(f"a changelog record without a key in partition {source}")
            latest[record.key] = record
        result.update((k, r) for k, r in latest.items() if r.value is not None)
    return [result[k] for k in sorted(result)]


def replicate_store(partitions: Mapping[int, Iterable[Record]], old: int, new: int) -> dict[int, list[Record]]:
    """A store of ``old`` partitions in ``new`` by replication (module doc): each new partition's :func:`replicas`
    of the old partitions that feed it (:func:`partition_targets`)."""
    targets = partition_targets(old, new)
    changelogs = {source: list(records) for source, records in partitions.items()}
    return {p: replicas({s: rows for s, rows in changelogs.items() if p in targets[s]}) for p in range(new)}


@dataclass(frozen=True)
class Digest:
    """A store's content, independent of order and partitioning: its key count and the sum of its rows'
    ``row_checksum`` (as the snapshot manifests sum them per partition)."""

    keys: int
    checksum: int


def digest(rows: Iterable[Record]) -> Digest:
    """The :class:`Digest` of a store's live records (keys and values, no tombstones)."""
    keys = checksum = 0
    for row in rows:
        if row.key is None or row.value is None:
            raise ValueError(f"a store's live record has a key and a value, got {row!r}")
        keys += 1
        checksum += row_checksum(row.key, row.value)
    return Digest(keys, checksum)


def misplaced(partitions: Mapping[int, Iterable[Record]], kind: StoreKind | str, count: int) -> list[str]:
    """What is wrong with a re-sharded store of ``count`` partitions, one phrase each: a key in a partition its
    record key does not hash to, a key in two partitions. Empty: every key is where a task will look for it."""
    record_key = partition_key_function(kind)
    problems = []
    home: dict[bytes, int] = {}
    for partition, rows in partitions.items():
        for row in rows:
            key = row.key
            if key is None:
                problems.append(f"a record without a key in partition {partition}")
                continue
            if key in home:
                problems.append(f"key {key[:60]!r} is in partitions {home[key]} and {partition}")
                continue
            home[key] = partition
            expected = partition_for_key(record_key(key), count)
            if expected != partition:
                problems.append(f"key {key[:60]!r} is in partition {partition}, its record key hashes to {expected}")
    return problems
