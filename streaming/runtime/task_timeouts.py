"""``task.timeout.ms`` (KIP-572): a task that cannot get through its creation because of the broker is retried,
not fatal, until it has made no progress for ``task.timeout.ms``.

Kafka Streams retries a task whose initialization or restoration hits a client ``TimeoutException``: the
committed-offset fetch of ``StreamTask.initializeMetadata`` and the changelog reader's offset lookups rethrow it
"to trigger ``task.timeout.ms``"; ``TaskManager.tryToCompleteRestoration`` catches it per task, calls
``task.maybeInitTaskTimeoutOrThrow(now, cause)`` and goes on with the other tasks; the next iteration of the
thread's loop tries the task again, and meanwhile the thread keeps processing its running tasks. The rule
(``AbstractTask.maybeInitTaskTimeoutOrThrow`` and ``clearTaskTimeout``, Kafka 3.x):

* the first failure sets the task's deadline to now + ``task.timeout.ms`` and the task is retried;
* a failure after the deadline (strictly later) fails the thread: "Task 0_1 did not make progress within
  300012 ms" (the time since the first failure), naming what failed;
* a success (progress) clears the deadline, so the next failure starts a new one.

Brook applies it to what a new task waits for from the broker (:mod:`streaming.runtime.stream_time`: the group's
committed offsets and the end of the stream-time partition; :mod:`streaming.runtime.changelog_reader`: the check
of a silent restore against the changelog's end). A task waiting on one of them is one whose input stays paused;
the thread's other tasks process. A reader whose fetches bring nothing is a failure at each look, records or
partition EOF are progress: a slow broker that keeps answering never fails a task, one that answers nothing for
``task.timeout.ms`` (5 minutes by default) does, with an error naming the task, the topic and partition and how
long it waited. As in Kafka Streams, ``task.timeout.ms=0`` still retries once: the second failure raises.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException

from streaming.errors import TaskTimeoutError

__all__ = ["DEFAULT_TASK_TIMEOUT_MS", "WARN_EVERY_MS", "TaskTimeouts", "is_transient"]

log = logging.getLogger(__name__)

DEFAULT_TASK_TIMEOUT_MS = 300_000  # Kafka Streams' default task.timeout.ms: 5 minutes

#: A task that keeps making no progress is logged once this long after its first failure, then at this interval.
WARN_EVERY_MS = 5_000

#: librdkafka errors that say the broker did not answer (in time) or is moving: worth a retry. (A
#: ``KafkaError.retriable()`` error is one too.)
_TRANSIENT = {
    KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._WAIT_COORD,
    KafkaError._IN_PROGRESS, KafkaError.REQUEST_TIMED_OUT, KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.NETWORK_EXCEPTION, KafkaError.UNKNOWN,  # UNKNOWN_SERVER_ERROR
}


def is_transient(error: KafkaError | KafkaException) -> bool:
    """Whether a client error is the broker's passing fault (a timeout, no coordinator, a lost connection; the
    embedded broker answers UNKNOWN_SERVER_ERROR when its storage refuses a write) rather than a fault of the
    request (no such topic, not authorized)."""
    if isinstance(error, KafkaException):
        if not error.args or not isinstance(error.args[0], KafkaError):
            return False
        error = error.args[0]
    return error.code() in _TRANSIENT or error.retriable()


@dataclass
class _Deadline:
    first_failure_ms: int
    deadline_ms: int
    next_warning_ms: int


class TaskTimeouts:
    """The ``task.timeout.ms`` deadline of each task of a stream thread (the rule is in the module docstring).

    A deadline belongs to the task object (as in Kafka Streams, where it is a field of the task): a task closed
    and created again starts with none. ``clock``: milliseconds, monotonic.
    """

    def __init__(self, timeout_ms: int, clock: Callable[[], int] | None = None) -> None:
        self.timeout_ms = timeout_ms
        self._clock = clock or (lambda: int(time.monotonic() * 1000))
        # id(task) -> (a weak reference to the task, its deadline); an entry goes when its task is collected
        self._deadlines: dict[int, tuple[weakref.ref[object], _Deadline]] = {}

    def _get(self, task: object) -> _Deadline | None:
        entry = self._deadlines.get(id(task))
        return entry[1] if entry is not None and entry[0]() is task else None

    def failed(self, task: object, task_id: str, what: str) -> None:
        """``task`` (``task_id``) made no progress: ``what`` failed (name the topic and partition, and why). Sets
        its deadline the first time; raises :class:`TaskTimeoutError` once a failure comes after the deadline.
        Kafka Streams' ``maybeInitTaskTimeoutOrThrow``."""
        now = self._clock()
        state = self._get(task)
        if state is None:
            key = id(task)
            self._deadlines[key] = (weakref.ref(task, lambda _: self._deadlines.pop(key, None)),
                                    _Deadline(now, now + self.timeout_ms, now + WARN_EVERY_MS))
            log.debug("task %s made no progress (%s); retrying until task.timeout.ms=%d passes without progress",
                      task_id, what, self.timeout_ms)
            return
        if now > state.deadline_ms:
            raise TaskTimeoutError(
                f"task {task_id} did not make progress within {now - state.first_failure_ms} ms: {what}. "
                f"Adjust task.timeout.ms (now {self.timeout_ms}) if the broker needs longer", task_id)
        if now >= state.next_warning_ms:
            state.next_warning_ms = now + WARN_EVERY_MS
            log.warning("task %s has made no progress for %.0f s: %s; it is retried while the thread's other tasks "
                        "process, until task.timeout.ms=%d passes without progress", task_id,
                        (now - state.first_failure_ms) / 1000, what, self.timeout_ms)

    def progressed(self, task: object) -> None:
        """``task`` made progress: clear its deadline (Kafka Streams' ``clearTaskTimeout``)."""
        if self._get(task) is not None:
            del self._deadlines[id(task)]

    def deadline_ms(self, task: object) -> int | None:
        """The task's deadline on the clock, if it has one."""
        state = self._get(task)
        return None if state is None else state.deadline_ms
