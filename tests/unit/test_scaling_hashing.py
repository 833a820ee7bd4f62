"""The scaling job's vectorized partitioner (assets.scaling.hashing) against the per-key one (Kafka's murmur2, whose
own test vectors are in test_murmur2.py): every key length across the 4-byte blocks and tails, null keys, an
Arrow array that is a slice of another, several partition counts."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from assets.scaling.hashing import partitions_of
from streaming.runtime.partitioning import partition_for_key


@pytest.mark.parametrize("partitions", [1, 2, 3, 4, 7, 8, 100, 2**31 - 1])
def test_every_key_gets_the_partition_kafkas_partitioner_gives_it(partitions: int) -> None:
    rng = random.Random(partitions)
    keys = [rng.randbytes(length) for length in range(41) for _ in range(50)] + [b"", b"key-000000001"]
    assert partitions_of(pa.array(keys, pa.binary()), partitions).tolist() == \
        [partition_for_key(key, partitions) for key in keys]


def test_a_null_key_gets_minus_one_and_a_slice_hashes_its_own_keys() -> None:
    keys = [f"user-{n}".encode() for n in range(20)]
    array = pa.array([*keys, None], pa.binary()).slice(7)
    assert partitions_of(array, 8).tolist() == [partition_for_key(key, 8) for key in keys[7:]] + [-1]
    assert partitions_of(pa.array([], pa.binary()), 8).tolist() == []


def test_a_partition_count_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="1 or more partitions, got 0"):
        partitions_of(pa.array([b"k"]), 0)
