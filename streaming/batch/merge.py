"""How the records several tasks wrote to one partition are ordered in a batch run.

Live, a partition that several tasks write to (a repartition topic, an output topic) holds their records in the
order the broker received them, which is the order the tasks sent them in: timing decides. A batch run needs one
deterministic order, and takes the one a live run has when its tasks keep pace with each other in event time
(what the orders pipeline's grace period has to cover anyway: docs/orders-pipeline.md): each record is placed by its sender's
stream time when it sent it, then by the sender's task id, then in the order the task sent it. So a record sent
late — an order two hours behind, say — arrives downstream after everything its sender had processed before it,
and meets there the stream time it would meet live, rather than the stream time of its own timestamp.

Results equal a live run's where they do not depend on the interleaving of records sent at the same stream time
by different tasks, or on tasks running apart in event time by more than the app's grace periods absorb.
"""

from __future__ import annotations

from collections.abc import Iterable

from streaming.batch.records import BatchOutput, BatchRecord

__all__ = ["merge_partition", "task_order"]


def task_order(task_id: str) -> tuple[int, int]:
    """A task id ``<subtopology>_<partition>`` as numbers, for ordering (``2_10`` after ``2_9``)."""
    subtopology, _, partition = task_id.partition("_")
    return int(subtopology), int(partition)


def merge_partition(outputs: Iterable[BatchOutput], first_offset: int) -> list[BatchRecord]:
    """The records of one partition, from the outputs several tasks sent to it (in any order), ordered as the
    module doc says and numbered from ``first_offset``."""
    ordered = sorted(outputs, key=lambda o: (o.stream_time, task_order(o.task), o.sequence))
    return [output.at(first_offset + index) for index, output in enumerate(ordered)]
