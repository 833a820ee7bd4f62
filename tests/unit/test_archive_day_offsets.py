"""The search for a day's offset range over record timestamps, on in-memory logs with gaps.

Offsets with gaps (left by compaction or transaction markers on a real broker) cannot be made on
the embedded broker, so the search runs here over a list of (offset, timestamp) records; the
integration test runs it against the broker.
"""

from __future__ import annotations

import random

import pytest

from assets.archive.day_offsets import Probe, transition


class LogProbe(Probe):
    """A :class:`Probe` over an in-memory partition: sorted ``(offset, timestamp)`` records."""

    def __init__(self, records: list[tuple[int, int]], end: int) -> None:
        super().__init__(consumer=None, topic="t", partition=0, end=end)  # type: ignore[arg-type]
        self.records = records

    def first_at(self, offset: int) -> tuple[int, int] | None:
        self.count += 1
        return next(((o, ts) for o, ts in self.records if o >= offset and o < self.end), None)


def _disordered_log(rng: random.Random, count: int, max_disorder: int, gap_share: float) -> list[tuple[int, int]]:
    """Records whose timestamps are at most ``max_disorder`` behind the maximum before them."""
    records, offset, high = [], rng.randrange(0, 50), 0
    for _ in range(count):
        offset += 1 + (rng.randrange(1, 5) if rng.random() < gap_share else 0)
        timestamp = max(high + rng.randrange(0, 40), 0)
        if rng.random() < 0.3:
            timestamp = max(high - rng.randrange(0, max_disorder + 1), 0)
        high = max(high, timestamp)
        records.append((offset, timestamp))
    return records


@pytest.mark.parametrize("seed", range(40))
def test_bounds_hold_every_record_of_the_window(seed: int) -> None:
    rng = random.Random(seed)
    disorder = rng.choice([0, 10, 100])
    records = _disordered_log(rng, rng.randrange(0, 300), disorder, gap_share=0.3)
    earliest = records[0][0] if records else 0
    end = records[-1][0] + 1 if records else 0
    window_start = rng.randrange(0, 4000)
    window_end = window_start + rng.randrange(1, 2000)

    probe = LogProbe(records, end)
    start, _ = transition(probe, window_start - disorder, earliest)
    stop, _ = transition(probe, window_end + disorder, earliest)
    in_window = [(o, ts) for o, ts in records if window_start <= ts < window_end]
    read = [(o, ts) for o, ts in records if start <= o < max(start, stop) and window_start <= ts < window_end]
    assert read == in_window
    assert probe.count <= 2 * (len(records).bit_length() + 2) + 2 * 10  # logarithmic, not a scan


def test_transition_is_a_record_boundary_and_end_when_nothing_is_late_enough() -> None:
    records = [(3, 100), (4, 90), (7, 200), (9, 150), (12, 300)]
    probe = LogProbe(records, end=13)
    # the first record from offset 5 is 200 >= 150; the one before it (offset 4) is 90 < 150
    assert transition(probe, 150, earliest=3) == (5, False)
    assert transition(probe, 50, earliest=3) == (3, False)
    assert transition(probe, 301, earliest=3) == (13, False)  # the end


def test_broker_hint_is_kept_only_when_confirmed() -> None:
    records = [(0, 10), (1, 20), (2, 30), (3, 40), (4, 50)]
    probe = LogProbe(records, end=5)
    assert transition(probe, 30, earliest=0, hint=2) == (2, True)
    assert transition(probe, 30, earliest=0, hint=0) == (2, False)  # coarse answer (record 0 is < 30)
    assert transition(probe, 30, earliest=0, hint=4) == (2, False)  # too late: record 3 is 40 >= 30
    gaps = LogProbe([(0, 10), (5, 50)], end=6)
    assert transition(gaps, 30, earliest=0, hint=5) == (1, False)  # cannot confirm across a gap: searched
