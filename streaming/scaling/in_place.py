"""Scaling in place: adding partitions to the existing topics (CreatePartitions, KIP-195), and how state moves.

Kafka can only add partitions, and never moves a record: after ``M`` -> ``N`` (``N`` > ``M``) a key's existing
records stay where they are and its new ones go to ``murmur2(key) % N``. With every worker stopped and every
input drained first, that is safe for the inputs (nothing old is left to read). State is not: old task ``p`` holds
the keys with ``murmur2 % M == p``, and of those it keeps only the ones with ``murmur2 % N == p``; every other key
moves to new partition ``q = murmur2 % N``, which is always one with ``q ≡ p (mod gcd(M, N))``
(:func:`move_targets`). A moved key's latest changelog record is written to partition ``q`` of the changelog and a
tombstone to partition ``p`` (:func:`key_moves`), so a restore of either task finds the key exactly once.

The order (:data:`STEPS`): producers stopped and the group drained; CreatePartitions on every topic of the group;
the group's committed offset set to 0 on each new partition of a topic the app reads *before* any producer sees
the new partitions (a producer that refreshes its metadata first could write records that a consumer starting
with ``auto.offset.reset=latest`` skips); state moved; stream time written for the new tasks; the reset epoch
bumped (every worker drops its local state and snapshots of the old layout); workers started; producers resumed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from math import gcd

from streaming.runtime.partitioning import partition_for_key
from streaming.scaling.reshard import partition_targets
from streaming.scaling.store_keys import StoreKind, partition_key_function

__all__ = ["STEPS", "InPlacePlan", "KeyMove", "in_place_plan", "kept_fraction", "key_moves", "move_targets"]

STEPS = (
    ("stop every producer of the group's input topics and every worker; wait until the group's committed offsets "
    "reach the ends of its inputs (the drain)"),
    ("CreatePartitions: each topic of the group to N partitions (inputs, intermediate and repartition topics, "
    "changelogs, stream-time topics)"),
    "commit offset 0 for the group on every new partition of a topic the app reads, before a producer sees it",
    ("move state: per store, each key whose partition changes is written to its new changelog partition and "
    "tombstoned in its old one"),
    "write the stream-time record of every task (the highest time of the old tasks)",
    "bump the reset epoch: workers wipe local state and snapshots of the old partitioning",
    "start the workers, then resume the producers (murmur2 partitioner)",
)


def move_targets(old: int, new: int) -> dict[int, list[int]]:
    """For each old partition ``p``, the new partitions its keys go to when a topic grows from ``old`` to ``new``
    partitions (``p`` itself among them): those ``q < new`` with ``q ≡ p (mod gcd(old, new))``."""
    if not 0 < old < new:
        raise ValueError(f"in-place scaling only adds partitions: {old} -> {new}")
    return partition_targets(old, new)


def kept_fraction(old: int, new: int) -> float:
    """The share of keys (murmur2 being uniform) that stay in their partition when ``old`` grows to ``new``:
    ``gcd(old, new) / new``."""
    return gcd(old, new) / new


@dataclass(frozen=True)
class KeyMove:
    """A changelog key that moves from partition ``source`` to ``target``."""

    key: bytes
    source: int
    target: int


def key_moves(entries: Iterable[tuple[int, bytes]], kind: StoreKind | str, new: int) -> list[KeyMove]:
    """The keys among ``entries`` (``(changelog partition, changelog key)``, a store's latest key per partition)
    whose partition changes when the store grows to ``new`` partitions: their record key (by ``kind``) hashes
    elsewhere."""
    record_key = partition_key_function(kind)
    moves = []
    for partition, key in entries:
        target = partition_for_key(record_key(key), new)
        if target != partition:
            moves.append(KeyMove(key, partition, target))
    return moves


@dataclass(frozen=True)
class InPlacePlan:
    """The in-place specifics of a scaling plan: the partitions added per physical topic, the partitions whose
    committed offset is set to 0 before producers see them (``topic[p]``), where each old partition's keys may go,
    the share of keys that stay, and the steps in order (:data:`STEPS`)."""

    added: dict[str, list[int]]
    commit_zero: list[str]
    targets: dict[int, list[int]]
    kept_fraction: float
    steps: list[str]


def in_place_plan(counts: Mapping[str, int], read: Iterable[str], old: int, new: int) -> InPlacePlan:
    """Growing the topics ``counts`` (physical name -> current partitions; 0: not created yet, the runtime creates
    it with ``new``) from ``old`` to ``new`` partitions; ``read``: the topics the application reads (their new
    partitions get offset 0 committed)."""
    reads = set(read)
    added = {topic: list(range(old, new)) for topic, count in counts.items() if count}
    commit_zero = [f"{topic}[{p}]" for topic, partitions in added.items() if topic in reads for p in partitions]
    return InPlacePlan(added, commit_zero, move_targets(old, new), kept_fraction(old, new), list(STEPS))
