"""Brook's pure-Python murmur2 partitioning agrees with librdkafka's ``murmur2_random`` partitioner (the
Java client's default for keyed records) on partitions chosen by a real producer."""

from __future__ import annotations

import random
import struct

import pytest
from confluent_kafka import Producer

from streaming.admin import create_topics
from streaming.runtime.partitioning import partition_for_key

pytestmark = pytest.mark.integration


def sample_keys() -> list[bytes]:
    rng = random.Random(20240601)
    keys = [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 41))) for _ in range(300)]  # any bytes
    keys += [f"user-{i}".encode() for i in range(100)]  # String serde
    keys += [struct.pack(">i", n) for n in (0, 1, -1, 2**31 - 1, -(2**31), 42)]  # Integer serde
    keys += [struct.pack(">q", n) for n in (0, 1, -1, 2**63 - 1, 1_700_000_000_000)]  # Long serde
    keys += [b"", "ключ-€-😀".encode(), b"\x00", b"\xff" * 3, b"\x80\x00\x00\x00\x01"]
    return keys


@pytest.mark.parametrize("partitions", [1, 3, 7, 12, 50])
def test_partition_for_key_matches_librdkafka_murmur2_random(bootstrap: str, unique_name: str,
                                                             partitions: int) -> None:
    topic = f"{unique_name}-p{partitions}"
    create_topics(bootstrap, {topic: partitions})
    chosen: dict[bytes, int] = {}
    failures: list[str] = []

    def delivered(error: object, message: object) -> None:
        if error is not None:
            failures.append(str(error))
        else:
            chosen[message.key()] = message.partition()  # type: ignore[attr-defined]

    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", "linger.ms": 5})
    keys = sample_keys()
    for key in keys:
        producer.produce(topic, b"v", key, on_delivery=delivered)
    assert producer.flush(30) == 0 and not failures, failures
    assert len(chosen) == len(set(keys))
    mismatches = {key: (got, partition_for_key(key, partitions)) for key, got in chosen.items()
                  if got != partition_for_key(key, partitions)}
    assert not mismatches
    if partitions > 1:
        assert len(set(chosen.values())) > 1
