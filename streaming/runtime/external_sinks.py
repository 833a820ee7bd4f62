"""External sinks: destinations outside Kafka (a database table) that a task writes at each commit.

A node that writes outside Kafka buffers what it would write and registers an :class:`ExternalSink` with its
task (``NodeContext.add_external_sink``). The commit path (:mod:`streaming.runtime.checkpoint`) flushes it
after the task's stores (whose caches forward their last values to it) and before the producer is flushed and
the offsets are committed, so an offset is committed only once what its record wrote is durable outside Kafka
too (at-least-once; the sink makes the replay idempotent).

A destination that cannot be reached makes ``flush()`` return False with the buffer kept: the task commits no
offsets (:meth:`StreamTask.prepare_commit` reports none), and the stream thread pauses the task's input
partitions (backpressure) and keeps polling, so it stays in its group, until a retry at the sink's
``retry_at`` succeeds; then it resumes them.
"""

from __future__ import annotations

from typing import Protocol


class ExternalSink(Protocol):
    """What a task needs of a destination outside Kafka."""

    def flush(self) -> bool:
        """Write everything buffered. True when it is durable; False when the destination could not be reached
        (the buffer is kept; do not call again before :attr:`retry_at`)."""
        ...

    @property
    def retry_at(self) -> float:
        """``time.monotonic()`` of the next useful flush after a failed one (0.0: no flush failed)."""
        ...

    def close(self) -> None:
        """Drop what is buffered (the task closes; its input is re-read from the last commit)."""
        ...


def flush_all(sinks: list[ExternalSink]) -> bool:
    """Flush every sink (each one even when an earlier one failed); True if all are durable."""
    results = [sink.flush() for sink in sinks]
    return all(results)
