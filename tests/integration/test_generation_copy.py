"""A topic copied by Spark into a new generation with another partition count (partition scaling's migrate):
every record lands on the partition Kafka's partitioner gives its key for the new count, each key's records keep
their order, timestamps and headers, and the verification catches a copy that does not match its source."""

from __future__ import annotations

from collections import defaultdict

import pytest
from pyspark.sql import SparkSession

from assets.spark.generation_copy import CopyError, copy_to_generation, verify_copy
from streaming import Serdes
from streaming.admin import create_topics
from streaming.naming import generation_name
from streaming.runtime.partitioning import partition_for_key
from streaming.testing.generators import GeneratedRecord
from streaming.testing.kafka import ConsumedRecord, produce, read_topic

pytestmark = [pytest.mark.slow, pytest.mark.integration]
STRING = Serdes.String()


def records(count: int) -> list[GeneratedRecord]:
    """Keys k0..k49, values numbered; out-of-order timestamps; every third record with a header."""
    return [GeneratedRecord(f"k{i % 50}", f"v{i}", 1_000_000 + (i * 7919) % 5_000,
                            headers=[("n", str(i).encode())] if i % 3 == 0 else None) for i in range(2_000)]


def by_key(consumed: list[ConsumedRecord]) -> dict[str, list[tuple[str, int, list[tuple[str, bytes]] | None]]]:
    keys: dict[str, list[tuple[str, int, list[tuple[str, bytes]] | None]]] = defaultdict(list)
    for record in sorted(consumed, key=lambda r: (r.partition, r.offset)):
        headers = [(k, bytes(v)) for k, v in record.headers] if record.headers else None
        keys[record.key].append((record.value, record.timestamp, headers))
    return dict(keys)


@pytest.mark.parametrize(("old", "new"), [(2, 4), (4, 2)])
def test_a_copy_re_partitions_by_murmur2_and_keeps_each_key_in_order(
        bootstrap: str, unique_name: str, spark: SparkSession, old: int, new: int) -> None:
    source, target = unique_name, generation_name(unique_name, 2)
    create_topics(bootstrap, {source: old, target: new})
    produce(bootstrap, source, records(2_000), STRING, STRING)
    config = {"bootstrap.servers": bootstrap}

    result = copy_to_generation(spark, client_config=config, source=source, target=target, partitions=new)
    verify_copy(spark, client_config=config, result=result)

    copied = read_topic(bootstrap, target, STRING, STRING, new)
    assert result.records == len(copied) == 2_000 and sum(result.source_ends.values()) == 2_000
    assert result.written == {p: sum(r.partition == p for r in copied) for p in range(new)}
    assert all(r.partition == partition_for_key(r.key.encode(), new) for r in copied)
    assert by_key(copied) == by_key(read_topic(bootstrap, source, STRING, STRING, old))

    # A second copy into the same (now full) target is refused, naming it.
    with pytest.raises(CopyError, match=f"topic {target} is not empty"):
        copy_to_generation(spark, client_config=config, source=source, target=target, partitions=new)


def test_a_target_that_does_not_match_is_caught(bootstrap: str, unique_name: str, spark: SparkSession) -> None:
    source, target = unique_name, generation_name(unique_name, 2)
    create_topics(bootstrap, {source: 2, target: 3})
    produce(bootstrap, source, records(300), STRING, STRING)
    config = {"bootstrap.servers": bootstrap}
    with pytest.raises(CopyError, match=f"topic {target} has 3 partitions, not 4"):
        copy_to_generation(spark, client_config=config, source=source, target=target, partitions=4)
    result = copy_to_generation(spark, client_config=config, source=source, target=target, partitions=3)
    produce(bootstrap, target, [GeneratedRecord("k1", "extra", 5)], STRING, STRING)  # one record too many
    tampered = type(result)(**{**result.__dict__, "written": {p: n + (p == partition_for_key(b"k1", 3))
                                                               for p, n in result.written.items()}})
    with pytest.raises(CopyError, match="1 keys differ"):
        verify_copy(spark, client_config=config, result=tampered)
