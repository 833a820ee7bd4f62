"""The changelog reader's check of a silent restore, when the broker does not answer it: looked up again, under
task.timeout.ms (Kafka Streams rethrows a timeout of the changelog reader's offset lookups "to trigger
task.timeout.ms"), and only after task.timeout.ms without an answer does the thread fail, naming the changelog.

The broker is a closed port: librdkafka gets no answer, as from a broker that is down.
"""

from __future__ import annotations

import functools
import logging

import pytest

from streaming.errors import TaskTimeoutError
from streaming.runtime import changelog_reader
from streaming.runtime.changelog_reader import StoreChangelogReader
from streaming.runtime.task_timeouts import TaskTimeouts

CHANGELOG = ("app-counts-changelog", 2)


class Clock:
    def __init__(self) -> None:
        self.now = 5_000_000

    def __call__(self) -> int:
        return self.now


class Task:
    id = "0_2"


class Store:
    name = "counts"
    timestamped = False


def test_a_silent_restore_whose_changelog_end_the_broker_does_not_give_is_checked_again_until_task_timeout_ms(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(changelog_reader, "STALL_SECONDS", 0.0)  # check at once (2 s of silence otherwise)
    monkeypatch.setattr(StoreChangelogReader, "end_offsets",  # each look waits 0.3 s for the broker, not 10 s
                        functools.partialmethod(StoreChangelogReader.end_offsets, timeout=0.3))
    clock = Clock()
    reader = StoreChangelogReader({"bootstrap.servers": "127.0.0.1:1", "group.id": "app"}, None,
                                  timeouts=TaskTimeouts(60_000, clock))
    task = Task()
    try:
        reader.register(task, {CHANGELOG: 17}, {CHANGELOG: Store()})
        with caplog.at_level(logging.WARNING, logger="streaming.runtime.task_timeouts"):
            for _ in range(3):  # the lookup fails: the task keeps restoring, nothing raises
                assert reader.restore(100, 0) == []
                clock.now += 20_000
            assert reader.active
            clock.now += 1
            with pytest.raises(TaskTimeoutError) as failure:
                reader.restore(100, 0)
    finally:
        reader.close()
    assert failure.value.task_id == "0_2"
    message = str(failure.value)
    assert message.startswith("task 0_2 did not make progress within 60001 ms: cannot read the end of changelog "
                              "app-counts-changelog[2] to check where store 'counts' restores from (offset 17)")
    assert any("has made no progress for 20 s" in record.getMessage() for record in caplog.records)
