"""Sizing a co-partition group from two lag samples (assets.lag.partitions_needed)."""

import pytest

from assets.lag import LagSample, partitions_needed


def sample(at: float, committed: dict[str, int], ends: dict[str, int]) -> LagSample:
    return LagSample(at=at, committed=committed, ends=ends)


def test_keeps_up_with_the_input_and_drains_the_backlog_with_headroom() -> None:
    # 2 partitions processed 2,000 records in 10 s (100/s each); 3,000 arrived (300/s); 60,000 behind.
    before = sample(0, {"in[0]": 0, "in[1]": 0}, {"in[0]": 30_000, "in[1]": 30_000})
    after = sample(10, {"in[0]": 1_000, "in[1]": 1_000}, {"in[0]": 31_500, "in[1]": 31_500})
    advice = partitions_needed(before, after, 2, headroom=1.5, drain_minutes=10, max_partitions=64)
    assert advice is not None and advice.lag == 61_000
    assert (advice.processing_rate, advice.input_rate, advice.per_partition_rate) == (200, 300, 100)
    # 1.5 * (300 + 61,000 / 600) / 100 = 6.02 -> 7
    assert advice.partitions == 7
    assert "lag 61,000 records" in advice.describe() and ": 7 partitions" in advice.describe()


def test_at_least_one_more_and_at_most_the_cap() -> None:
    before = sample(0, {"in[0]": 0}, {"in[0]": 100})
    after = sample(10, {"in[0]": 1_000}, {"in[0]": 1_100})  # keeps up: 100/s in, 100/s processed, 100 behind
    advice = partitions_needed(before, after, 4, headroom=1.0, drain_minutes=60, max_partitions=64)
    assert advice is not None and advice.partitions == 5
    fast = sample(10, {"in[0]": 10}, {"in[0]": 1_000_100})
    capped = partitions_needed(before, fast, 4, headroom=1.0, drain_minutes=60, max_partitions=16)
    assert capped is not None and capped.partitions == 16


def test_no_progress_means_no_advice_and_samples_must_be_in_order() -> None:
    before = sample(0, {"in[0]": 5}, {"in[0]": 100})
    assert partitions_needed(before, sample(10, {"in[0]": 5}, {"in[0]": 200}), 1, headroom=1.5, drain_minutes=10,
                             max_partitions=8) is None
    with pytest.raises(ValueError, match="out of order"):
        partitions_needed(before, sample(0, {}, {}), 1, headroom=1.5, drain_minutes=10, max_partitions=8)


def test_a_partition_without_a_commit_lags_from_zero_and_round_trips_json() -> None:
    s = sample(3.5, {"in[0]": 10}, {"in[0]": 15, "in[1]": 7})
    assert s.lag == 12
    assert LagSample.from_json(s.to_json()) == s
