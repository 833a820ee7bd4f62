"""A store re-sharded by Spark into a new changelog generation (partition scaling): the latest value of every key
on the partition murmur2 gives it for the new count, a snapshot of the new generation that covers the new
changelog to its end, and a verification that refuses a new changelog that is not empty."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from assets.spark.reshard import ReshardError, reshard_store
from streaming import Serdes
from streaming.admin import create_topics
from streaming.naming import changelog_topic, generation_name
from streaming.runtime.partitioning import partition_for_key
from streaming.state import snapshots
from streaming.testing.generators import GeneratedRecord
from streaming.testing.kafka import produce, read_topic

pytestmark = [pytest.mark.slow, pytest.mark.integration]
STRING, LONG = Serdes.String(), Serdes.Long()
COMPACTED = {"cleanup.policy": "compact"}


def test_a_store_moves_to_the_partition_of_each_key_with_its_latest_value(
        bootstrap: str, unique_name: str, spark: SparkSession, tmp_path: Path) -> None:
    changelog = changelog_topic(unique_name, "counts")
    new_changelog = generation_name(changelog, 2)
    create_topics(bootstrap, {changelog: 2, new_changelog: 4}, configs={changelog: COMPACTED, new_changelog: COMPACTED})
    # 300 updates of 60 keys, each on the partition its key has among 2; key k7 deleted at the end.
    updates = [GeneratedRecord(f"k{i % 60}", i, 1_000 + i) for i in range(300)]
    for partition in range(2):
        produce(bootstrap, changelog, [u for u in updates if partition_for_key(u.key.encode(), 2) == partition],
                STRING, LONG)
    produce(bootstrap, changelog, [GeneratedRecord("k7", None, 2_000)], STRING, LONG)
    expected = {u.key: u.value for u in updates}
    del expected["k7"]
    location = str(tmp_path / "snapshots")
    config = {"bootstrap.servers": bootstrap}

    result = reshard_store(spark, client_config=config, location=location, application_id=unique_name,
                           store="counts", changelog=changelog, new_changelog=new_changelog, partitions=4,
                           partition_key=None, reset_epoch="none", generation="2")

    moved = read_topic(bootstrap, new_changelog, STRING, LONG, 4)
    assert {r.key: r.value for r in moved} == expected and len(moved) == len(expected) == result.keys
    assert all(r.partition == partition_for_key(r.key.encode(), 4) for r in moved)
    after = snapshots.latest_manifest(location, unique_name, "counts")
    assert after is not None and after.snapshot_id == result.after.snapshot_id
    assert after.changelog_topic == new_changelog and after.store_identity.partitions == 4
    assert after.store_identity.generation == "2"
    assert after.next_offsets == {p: sum(r.partition == p for r in moved) for p in range(4)}
    rows = {key.decode(): LONG.deserialize(value)
            for p in range(4) for batch in snapshots.read_partition(location, after, p) for key, value, _ in batch}
    assert rows == expected
    assert result.before.changelog_topic == changelog and result.before.keys == len(expected)

    # Again into the same (now written) changelog: refused, nothing changed.
    with pytest.raises(ReshardError, match=f"the new changelog {new_changelog} must be empty with 4 partitions"):
        reshard_store(spark, client_config=config, location=location, application_id=unique_name, store="counts",
                      changelog=changelog, new_changelog=new_changelog, partitions=4, partition_key=None,
                      reset_epoch="none", generation="2")
    assert snapshots.latest_manifest(location, unique_name, "counts").snapshot_id == after.snapshot_id  # type: ignore[union-attr]
