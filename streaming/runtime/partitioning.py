"""Kafka's default key partitioning, in pure Python: which partition a serialized key lands on.

``partition_for_key(key_bytes, n)`` is the Java client's ``Utils.toPositive(Utils.murmur2(keyBytes)) %
numPartitions`` — the partition Kafka Streams (and librdkafka's ``murmur2_random`` partitioner, which
Brook's producers use) sends a record with a non-null key to. Interactive queries use it to find the
task that owns a key; the platform's re-sharding of state (Spark) uses it to move keys to the
partition a producer would have chosen.

Records with a null key are not covered: producers spread those (Java: sticky, librdkafka: random).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

__all__ = ["murmur2", "partition_for_key", "partitions_for_keys", "to_positive"]

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF
_WORDS = {}  # word count -> struct reading that many little-endian uint32s


def _words(count: int) -> struct.Struct:
    reader = _WORDS.get(count)
    if reader is None:
        reader = _WORDS[count] = struct.Struct(f"<{count}I")
    return reader


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """Kafka's murmur2 hash of ``data`` as the Java client returns it: a signed 32-bit int.

    Same algorithm and seed as ``org.apache.kafka.common.utils.Utils.murmur2`` and librdkafka's
    ``rd_murmur2`` (MurmurHash2, seed ``0x9747b28c``, little-endian 4-byte blocks).
    """
    length = len(data)
    h = (_SEED ^ length) & _MASK
    blocks = length >> 2
    if blocks:
        for k in _words(blocks).unpack_from(data):
            k = (k * _M) & _MASK
            k ^= k >> 24
            k = (k * _M) & _MASK
            h = ((h * _M) & _MASK) ^ k
    tail = length & 3
    if tail:
        base = blocks << 2
        if tail == 3:
            h ^= data[base + 2] << 16
        if tail >= 2:
            h ^= data[base + 1] << 8
        h ^= data[base]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - 0x1_0000_0000 if h & 0x8000_0000 else h


def to_positive(number: int) -> int:
    """The Java client's ``Utils.toPositive``: clear the sign bit (not ``abs``)."""
    return number & 0x7FFFFFFF


def partition_for_key(key_bytes: bytes | bytearray | memoryview, num_partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a record with these (non-null) key bytes."""
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be >= 1, got {num_partitions}")
    if key_bytes is None:
        raise ValueError("a null key has no fixed partition (producers spread null-key records)")
    return (murmur2(key_bytes) & 0x7FFFFFFF) % num_partitions


def partitions_for_keys(keys: Iterable[bytes], num_partitions: int) -> list[int]:
    """``partition_for_key`` for many keys (for batch re-sharding)."""
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be >= 1, got {num_partitions}")
    return [(murmur2(key) & 0x7FFFFFFF) % num_partitions for key in keys]
