"""Scaling in place (issue 18): where each old partition's keys go when partitions are added, and which keys of a
real window store's changelog move, checked against murmur2 and the layout's record key."""

from __future__ import annotations

import random
from math import gcd

import pytest

from streaming import Materialized, Serdes, StreamsBuilder, TimeWindows
from streaming.naming import changelog_topic
from streaming.runtime.partitioning import partition_for_key
from streaming.scaling import StoreKind, partition_key_function
from streaming.scaling.in_place import STEPS, in_place_plan, kept_fraction, key_moves, move_targets
from streaming.testing import TopologyTestDriver

String, Bytes = Serdes.String(), Serdes.Bytes()


def test_move_targets_are_the_partitions_of_the_same_residue() -> None:
    assert move_targets(2, 4) == {0: [0, 2], 1: [1, 3]}
    assert move_targets(2, 3) == {0: [0, 1, 2], 1: [0, 1, 2]}
    assert move_targets(4, 6) == {0: [0, 2, 4], 1: [1, 3, 5], 2: [0, 2, 4], 3: [1, 3, 5]}
    assert kept_fraction(2, 4) == 0.5 and kept_fraction(2, 3) == pytest.approx(1 / 3)
    for old, new in ((0, 2), (3, 3), (4, 2)):
        with pytest.raises(ValueError, match="only adds partitions"):
            move_targets(old, new)


@pytest.mark.parametrize(("old", "new"), [(2, 4), (2, 3), (4, 6), (3, 8)])
def test_every_key_goes_to_a_target_of_its_old_partition_and_the_kept_share_is_as_computed(old: int,
                                                                                          new: int) -> None:
    rng = random.Random(old * 100 + new)
    keys = [rng.randbytes(rng.randint(1, 24)) for _ in range(20_000)]
    targets = move_targets(old, new)
    entries = [(partition_for_key(key, old), key) for key in keys]
    moves = key_moves(entries, StoreKind.KEY_VALUE, new)
    moved = {m.key for m in moves}
    for move in moves:
        assert move.target in targets[move.source] and move.target != move.source
        assert move.target == partition_for_key(move.key, new)
    for partition, key in entries:
        if key not in moved:  # old partition p keeps exactly the keys with murmur2 % N == p
            assert partition_for_key(key, new) == partition
    assert 1 - len(moves) / len(keys) == pytest.approx(gcd(old, new) / new, abs=0.02)


def test_the_keys_of_a_real_window_store_move_by_their_record_key() -> None:
    """The changelog of a windowed count, as a 2-partition app would have it (partition = murmur2 of the record
    key % 2), grown to 4: a window key moves exactly when its record key's partition changes."""
    builder = StreamsBuilder()
    builder.stream("in", key_serde=String, value_serde=String).group_by_key() \
        .windowed_by(TimeWindows.of(10)).count(Materialized.as_("w").with_caching_disabled())
    users = [f"user-{i}" for i in range(200)]
    with TopologyTestDriver(builder.build(), {"application.id": "app"}) as driver:
        source = driver.create_input_topic("in", String, String)
        for ts in (1, 15):
            for user in users:
                source.pipe_input(user, "v", timestamp=ts)
        keys = [r.key for r in driver.create_output_topic(changelog_topic("app", "w"), Bytes, Bytes)
                .read_records_to_list()]
    record_key = partition_key_function(StoreKind.WINDOW)
    entries = [(partition_for_key(record_key(key), 2), key) for key in keys]
    moves = key_moves(entries, StoreKind.WINDOW, 4)
    expected = {key for key in keys if partition_for_key(record_key(key), 4) >= 2}  # p -> p + 2 for 2 -> 4
    assert {m.key for m in moves} == expected and 0 < len(expected) < len(keys)
    assert all(m.target == m.source + 2 for m in moves)
    moved_users = {record_key(m.key).decode() for m in moves}
    assert moved_users == {u for u in users if partition_for_key(u.encode(), 4) >= 2}


def test_the_in_place_plan_adds_partitions_and_commits_offset_zero_on_the_new_read_ones_before_producers() -> None:
    counts = {"orders": 2, "users": 2, "o-users-changelog": 2, "o-0-stream-time": 0}  # stream time not created yet
    plan = in_place_plan(counts, ["orders", "users"], 2, 4)
    assert plan.added == {"orders": [2, 3], "users": [2, 3], "o-users-changelog": [2, 3]}
    assert plan.commit_zero == ["orders[2]", "orders[3]", "users[2]", "users[3]"]
    assert plan.targets == {0: [0, 2], 1: [1, 3]} and plan.kept_fraction == 0.5
    steps = plan.steps
    assert steps == list(STEPS)
    assert steps.index(next(s for s in steps if s.startswith("commit offset 0"))) < \
        steps.index(next(s for s in steps if "resume the producers" in s))
    assert steps[0].startswith("stop every producer") and steps[1].startswith("CreatePartitions")
