"""task.timeout.ms (KIP-572), tested against a model of Kafka Streams' rule written here, event by event."""

from __future__ import annotations

import logging
import random

import pytest
from confluent_kafka import KafkaError, KafkaException

from streaming.config import StreamsConfig
from streaming.errors import ConfigError, TaskTimeoutError
from streaming.runtime.task_timeouts import WARN_EVERY_MS, TaskTimeouts, is_transient


class KafkaStreamsTaskTimeout:
    """``AbstractTask.maybeInitTaskTimeoutOrThrow`` and ``clearTaskTimeout`` (Kafka 3.x), transcribed:

    if (deadlineMs == NO_DEADLINE) deadlineMs = currentWallClockMs + config.taskTimeoutMs;
    else if (currentWallClockMs > deadlineMs) throw ... "did not make progress within
        (currentWallClockMs - deadlineMs + config.taskTimeoutMs) ms"
    clearTaskTimeout: deadlineMs = NO_DEADLINE
    """

    NO_DEADLINE = -1

    def __init__(self, task_timeout_ms: int) -> None:
        self.task_timeout_ms = task_timeout_ms
        self.deadline_ms = self.NO_DEADLINE

    def maybe_init_task_timeout_or_throw(self, now: int) -> int | None:
        """None, or the time the thrown error says the task waited."""
        if self.deadline_ms == self.NO_DEADLINE:
            self.deadline_ms = now + self.task_timeout_ms
        elif now > self.deadline_ms:
            return now - self.deadline_ms + self.task_timeout_ms
        return None

    def clear_task_timeout(self) -> None:
        self.deadline_ms = self.NO_DEADLINE


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


class Task:
    def __init__(self, task_id: str) -> None:
        self.id = task_id


def replay(events: list[tuple[int, str]], timeout_ms: int) -> tuple[list[int | None], list[int | None]]:
    """Feed ``(time, "fail" | "progress")`` events to the model and to TaskTimeouts; what each said per event
    (the waited time of a failure that raised, else None)."""
    model, clock, task = KafkaStreamsTaskTimeout(timeout_ms), Clock(), Task("0_1")
    timeouts = TaskTimeouts(timeout_ms, clock)
    expected: list[int | None] = []
    actual: list[int | None] = []
    for at, event in events:
        clock.now = at
        if event == "progress":
            model.clear_task_timeout()
            timeouts.progressed(task)
            expected.append(None)
            actual.append(None)
            continue
        expected.append(model.maybe_init_task_timeout_or_throw(at))
        try:
            timeouts.failed(task, task.id, "cannot read the stream time from app-0-stream-time[1]")
            actual.append(None)
        except TaskTimeoutError as exc:
            actual.append(int(str(exc).split("within ")[1].split(" ms")[0]))
            model.clear_task_timeout()  # the task fails: the next events start over in both
            timeouts.progressed(task)
        assert timeouts.deadline_ms(task) == (None if model.deadline_ms == model.NO_DEADLINE else model.deadline_ms)
    return expected, actual


def test_the_first_failure_sets_the_deadline_and_a_failure_strictly_after_it_raises() -> None:
    t0 = 1_000_000
    events = [(t0, "fail"), (t0 + 200, "fail"), (t0 + 300_000, "fail"),  # at the deadline exactly: retried
              (t0 + 300_001, "fail")]  # one ms past it: fails, having waited 300,001 ms
    expected, actual = replay(events, 300_000)
    assert expected == actual == [None, None, None, 300_001]


def test_progress_clears_the_deadline_and_the_next_failure_starts_a_new_one() -> None:
    t0 = 1_000_000
    events = [(t0, "fail"), (t0 + 250_000, "progress"), (t0 + 299_000, "fail"), (t0 + 400_000, "fail"),
              (t0 + 599_000, "fail"), (t0 + 599_001, "fail")]
    expected, actual = replay(events, 300_000)
    assert expected == actual == [None, None, None, None, None, 300_001]


def test_a_timeout_of_zero_still_retries_once() -> None:
    t0 = 1_000_000
    expected, actual = replay([(t0, "fail"), (t0, "fail"), (t0 + 1, "fail")], 0)
    assert expected == actual == [None, None, 1]


@pytest.mark.parametrize("seed", range(20))
def test_random_histories_match_the_model(seed: int) -> None:
    rng = random.Random(seed)
    timeout_ms = rng.choice([0, 1, 50, 1_000])
    now, events = 1_000_000, []
    for _ in range(200):
        now += rng.choice([0, 1, timeout_ms, timeout_ms + 1, rng.randrange(0, 2 * timeout_ms + 2)])
        events.append((now, rng.choice(["fail", "fail", "fail", "progress"])))
    expected, actual = replay(events, timeout_ms)
    assert expected == actual


def test_the_error_names_the_task_what_failed_and_how_long_it_waited() -> None:
    clock, task = Clock(), Task("1_3")
    timeouts = TaskTimeouts(2_000, clock)
    what = "no partition EOF of app-1-stream-time[3] (read up to offset 5)"
    timeouts.failed(task, task.id, what)
    clock.now += 2_500
    with pytest.raises(TaskTimeoutError) as failure:
        timeouts.failed(task, task.id, what)
    assert failure.value.task_id == "1_3"
    assert str(failure.value) == (f"task 1_3 did not make progress within 2500 ms: {what}. Adjust task.timeout.ms "
                                  f"(now 2000) if the broker needs longer")


def test_a_deadline_belongs_to_the_task_object_a_task_created_again_starts_without_one() -> None:
    clock = Clock()
    timeouts = TaskTimeouts(1_000, clock)
    old = Task("0_0")
    timeouts.failed(old, old.id, "x")
    assert timeouts.deadline_ms(old) == clock.now + 1_000
    clock.now += 5_000
    new = Task("0_0")  # closed and created again, same id
    timeouts.failed(new, new.id, "x")  # a first failure: no error, a fresh deadline
    assert timeouts.deadline_ms(new) == clock.now + 1_000
    del old
    assert len(timeouts._deadlines) == 1  # the closed task's entry went with it


def test_a_task_stalled_long_is_logged_every_few_seconds_not_at_each_look(caplog: pytest.LogCaptureFixture) -> None:
    clock, task = Clock(), Task("0_2")
    timeouts = TaskTimeouts(300_000, clock)
    with caplog.at_level(logging.WARNING, logger="streaming.runtime.task_timeouts"):
        for _ in range(3 * WARN_EVERY_MS // 10 + 1):  # a look every 10 ms for 15 s
            timeouts.failed(task, task.id, "no partition EOF of app-0-stream-time[2]")
            clock.now += 10
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 3
    assert lines[0].startswith("task 0_2 has made no progress for 5 s: no partition EOF of app-0-stream-time[2]")


def test_transient_client_errors_are_retried_others_are_not() -> None:
    for code in (KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError.COORDINATOR_NOT_AVAILABLE,
                 KafkaError.NOT_COORDINATOR, KafkaError.REQUEST_TIMED_OUT, KafkaError.UNKNOWN):
        assert is_transient(KafkaException(KafkaError(code)))
    for code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.TOPIC_AUTHORIZATION_FAILED,
                 KafkaError.GROUP_AUTHORIZATION_FAILED):
        assert not is_transient(KafkaException(KafkaError(code)))
    assert not is_transient(KafkaException("no KafkaError inside"))


def test_task_timeout_ms_is_a_validated_config_key_with_kafka_streams_default() -> None:
    base = {"application.id": "a", "bootstrap.servers": "b:9092"}
    assert StreamsConfig(base)["task.timeout.ms"] == 300_000
    assert StreamsConfig({**base, "task.timeout.ms": 0})["task.timeout.ms"] == 0
    with pytest.raises(ConfigError, match="task.timeout.ms"):
        StreamsConfig({**base, "task.timeout.ms": -1})
