"""The token buckets behind ``processing.rate.limit.records`` / ``.bytes`` (a manual clock: no sleeping)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from streaming.runtime.rate_limit import BURST_SECONDS, InputRateLimiter, TokenBucket, thread_rate_limiter


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Message:
    """What the limiter reads of a polled confluent-kafka message."""

    k: bytes | None
    v: bytes | None
    err: object = None

    def key(self) -> bytes | None:
        return self.k

    def value(self) -> bytes | None:
        return self.v

    def error(self) -> object:
        return self.err


def test_a_bucket_starts_full_with_a_tenth_of_a_second_of_its_rate() -> None:
    bucket = TokenBucket(1000, clock=Clock())
    assert bucket.capacity == 1000 * BURST_SECONDS == bucket.tokens


def test_a_slow_bucket_holds_at_least_one_token() -> None:
    assert TokenBucket(2, clock=Clock()).capacity == 1.0


def test_refill_is_capped_at_the_capacity() -> None:
    clock = Clock()
    bucket = TokenBucket(100, clock=clock)
    bucket.take(10)
    clock.now += 0.05
    assert bucket.tokens == pytest.approx(5)
    clock.now += 60
    assert bucket.tokens == pytest.approx(10)


def test_taking_more_than_it_holds_is_a_debt_paid_back_first() -> None:
    clock = Clock()
    bucket = TokenBucket(100, clock=clock)
    bucket.take(60)  # holds 10: 50 in debt
    assert bucket.tokens == pytest.approx(-50)
    assert bucket.wait_seconds(1) == pytest.approx(0.51)
    clock.now += 0.51
    assert bucket.tokens == pytest.approx(1)
    assert bucket.wait_seconds(1) == 0


def test_over_a_long_run_the_bucket_allows_its_rate() -> None:
    clock = Clock()
    bucket = TokenBucket(500, clock=clock)
    taken = 0
    while clock.now < 1010:  # 10 s of "poll as much as allowed, else wait"
        allowed = int(bucket.tokens)
        if allowed:
            bucket.take(allowed)
            taken += allowed
        clock.now += max(bucket.wait_seconds(1), 0.001)
    assert 500 * 10 <= taken <= 500 * 10 + bucket.capacity + 1


def test_a_bucket_needs_a_positive_rate() -> None:
    with pytest.raises(ValueError, match="positive rate"):
        TokenBucket(0)


def test_the_records_limit_caps_the_next_poll() -> None:
    clock = Clock()
    limiter = InputRateLimiter(1000, None, clock=clock)
    assert limiter.allowance(2000) == 100  # a full bucket: 0.1 s of 1000/s
    assert limiter.allowance(30) == 30
    limiter.charge([Message(b"k", b"v")] * 100)
    assert limiter.allowance(2000) == 0
    assert limiter.wait_seconds() == pytest.approx(0.001)
    clock.now += 0.05
    assert limiter.allowance(2000) == 50


def test_errors_in_a_poll_are_not_charged() -> None:
    limiter = InputRateLimiter(1000, 1000, clock=Clock())
    limiter.charge([Message(None, None, err="partition EOF")])
    assert limiter.records.tokens == 100 and limiter.bytes.tokens == 100  # type: ignore[union-attr]


def test_the_bytes_limit_counts_keys_and_values_and_waits_out_an_overshoot() -> None:
    clock = Clock()
    limiter = InputRateLimiter(None, 1000, clock=clock)  # holds 100 bytes
    assert limiter.allowance(500) == 1  # the size of a record is not known yet
    limiter.charge([Message(b"key", b"x" * 97), Message(None, b"y" * 150)])  # 250 bytes: 150 in debt
    assert limiter.allowance(500) == 0
    assert limiter.wait_seconds() == pytest.approx(0.15)
    clock.now += 0.15
    assert limiter.allowance(500) == 1  # the bucket is at 0: one record, paid back later
    clock.now += 10
    assert limiter.allowance(500) == 1  # records (125 B on average) larger than the bucket: one at a time


def test_the_bytes_limit_sizes_a_poll_by_the_records_last_taken() -> None:
    clock = Clock()
    limiter = InputRateLimiter(None, 100_000, clock=clock)  # holds 10,000 bytes
    limiter.charge([Message(None, b"v" * 100)] * 10)  # 1,000 bytes of 100-byte records
    assert limiter.allowance(5000) == 90
    assert limiter.allowance(50) == 50


def test_both_limits_hold_back_until_both_allow() -> None:
    clock = Clock()
    limiter = InputRateLimiter(100, 1000, clock=clock)
    limiter.charge([Message(None, b"z" * 300)])  # 1 record, 300 bytes: bytes in debt by 200
    assert limiter.allowance(50) == 0
    assert limiter.wait_seconds() == pytest.approx(0.2)


def test_an_instance_limit_is_split_over_its_stream_threads() -> None:
    assert thread_rate_limiter(0, 0, 2) is None
    limiter = thread_rate_limiter(1000, 0, 4)
    assert limiter is not None and limiter.records is not None and limiter.bytes is None
    assert limiter.records.rate == 250
    bytes_only = thread_rate_limiter(0, 10_000, 2)
    assert bytes_only is not None and bytes_only.records is None and bytes_only.bytes.rate == 5000  # type: ignore[union-attr]
