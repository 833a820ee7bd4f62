"""KStream-KStream joins through the test driver: inner, left and outer, window edges, missing sides,
and a random oracle."""

from __future__ import annotations

import random

import pytest

from streaming import JoinWindows, Serdes, StreamsBuilder, TopologyError
from streaming.testing import TopologyTestDriver

String = Serdes.String()


def run(kind: str, windows: JoinWindows, left: list[tuple[str, str, int]], right: list[tuple[str, str, int]],
        order: list[str] | None = None) -> list[tuple[str, str, int]]:
    """Pipe the records (``order``: "l"/"r" per record, else all left then all right); the join's output."""
    builder = StreamsBuilder()
    this = builder.stream("left", key_serde=String, value_serde=String)
    other = builder.stream("right", key_serde=String, value_serde=String)
    getattr(this, kind)(other, lambda a, b: f"{a}+{b}", windows).to("out", value_serde=String)
    with TopologyTestDriver(builder.build()) as driver:
        topics = {"l": driver.create_input_topic("left", String, String),
                  "r": driver.create_input_topic("right", String, String)}
        queues = {"l": list(left), "r": list(right)}
        for side in order or ["l"] * len(left) + ["r"] * len(right):
            key, value, ts = queues[side].pop(0)
            topics[side].pipe_input(key, value, timestamp=ts)
        return [(r.key, r.value, r.timestamp) for r in driver.create_output_topic("out", String, String)
                .read_records_to_list()]


def test_inner_join_edges_of_the_window() -> None:
    windows = JoinWindows.of(10)
    left = [("a", "L", 100)]
    right = [("a", "just-inside-after", 110), ("a", "just-outside-after", 111), ("a", "just-inside-before", 90),
             ("a", "just-outside-before", 89), ("b", "other-key", 100)]
    assert run("join", windows, left, right) == [("a", "L+just-inside-after", 110), ("a", "L+just-inside-before", 100)]


def test_before_and_after_are_asymmetric() -> None:
    windows = JoinWindows.of(0).before(5).after(20)
    left = [("a", "L", 100)]
    right = [("a", "r95", 95), ("a", "r94", 94), ("a", "r120", 120), ("a", "r121", 121)]
    assert [v for _, v, _ in run("join", windows, left, right)] == ["L+r95", "L+r120"]


def test_left_join_emits_unmatched_records_only_when_the_window_closes() -> None:
    windows = JoinWindows.of(10, grace=5)
    left = [("a", "L1", 100), ("b", "L2", 100)]
    right = [("a", "R1", 108), ("z", "tick", 114), ("z", "tick", 116)]
    out = run("left_join", windows, left, right, order=["l", "l", "r", "r", "r"])
    # b's window [90, 110] closes when stream time passes 110 + 5: at 116, not at 114
    assert out == [("a", "L1+R1", 108), ("b", "L2+None", 100)]
    assert run("left_join", windows, left, right[:2], order=["l", "l", "r", "r"]) == [("a", "L1+R1", 108)]


def test_outer_join_emits_both_missing_sides_and_late_records_at_once() -> None:
    windows = JoinWindows.of(10)
    left = [("a", "L1", 100), ("c", "late", 50)]
    right = [("b", "R1", 100), ("z", "tick", 200)]
    out = run("outer_join", windows, left, right, order=["l", "r", "r", "l"])
    assert out == [("a", "L1+None", 100), ("b", "None+R1", 100), ("c", "late+None", 50)]


def test_null_keys_and_values_are_dropped_and_counted() -> None:
    builder = StreamsBuilder()
    this = builder.stream("left", key_serde=String, value_serde=String)
    this.join(builder.stream("right", key_serde=String, value_serde=String), lambda a, b: a + b,
              JoinWindows.of(10)).to("out")
    with TopologyTestDriver(builder.build()) as driver:
        driver.pipe_raw("left", None, b"v", 1)
        driver.pipe_raw("right", b"k", None, 1)
        assert driver.metrics()["dropped_records"] == 2


def test_joiner_with_key_and_a_key_changing_stream_repartitions() -> None:
    builder = StreamsBuilder()
    this = builder.stream("left", key_serde=String, value_serde=String).select_key(lambda k, v: v)
    other = builder.stream("right", key_serde=String, value_serde=String)
    this.join(other, lambda key, a, b: f"{key}:{b}", JoinWindows.of(10), key_serde=String,
              value_serde=String).to("out", value_serde=String)
    topology = builder.build()
    assert any(topic.endswith("-left-repartition") for topic in topology.internal_topics)
    with TopologyTestDriver(topology) as driver:
        driver.create_input_topic("left", String, String).pipe_input("x", "a", timestamp=5)
        driver.create_input_topic("right", String, String).pipe_input("a", "R", timestamp=6)
        assert driver.create_output_topic("out", String, String).read_key_values() == [("a", "a:R")]


def test_join_needs_join_windows() -> None:
    builder = StreamsBuilder()
    this, other = builder.stream("l"), builder.stream("r")
    with pytest.raises(TopologyError, match="needs JoinWindows"):
        this.join(other, lambda a, b: a, 10)  # type: ignore[arg-type]


def test_left_join_matches_a_random_oracle() -> None:
    rng = random.Random(9)
    before, after, grace = 6, 4, 3
    records = []
    for n in range(1500):
        ts = 100 + n // 2 - (rng.randint(0, 8) if rng.random() < 0.2 else 0)
        records.append(("l" if rng.random() < 0.5 else "r", f"k{rng.randrange(8)}", f"v{n}", ts))
    left = [(k, v, ts) for side, k, v, ts in records if side == "l"]
    right = [(k, v, ts) for side, k, v, ts in records if side == "r"]
    out = run("left_join", JoinWindows.of(0, grace=grace).before(before).after(after), left, right,
              order=[side for side, *_ in records])
    seen: list[tuple[str, str, str, int]] = []  # records processed so far
    expected_inner = set()
    waiting_matched = set()  # on-time left records that got a partner while their window was open
    stream_time = -1
    on_time = {}
    for side, key, value, ts in records:
        stream_time = max(stream_time, ts)
        if side == "l":
            on_time[value] = ts + after >= stream_time
        for other_side, other_key, other_value, other_ts in seen:
            if other_side == side or other_key != key:
                continue
            left_value, left_ts, right_value, right_ts = (value, ts, other_value, other_ts) if side == "l" else \
                (other_value, other_ts, value, ts)
            if left_ts - before <= right_ts <= left_ts + after:
                expected_inner.add((key, f"{left_value}+{right_value}", max(ts, other_ts)))
                if on_time[left_value] and stream_time <= left_ts + after + grace:
                    waiting_matched.add(left_value)
        seen.append((side, key, value, ts))
    inner = {record for record in out if not record[1].endswith("+None")}
    assert inner == expected_inner
    unmatched = {record[1].split("+")[0] for record in out if record[1].endswith("+None")}
    assert waiting_matched and not unmatched & waiting_matched  # no spurious left result for them
    matched_left = {record[1].split("+")[0] for record in inner}
    closed = {value for _, value, ts in left if ts + after + grace < stream_time}
    assert closed <= matched_left | unmatched  # every closed left record came out, joined or not
