"""Batch reprocessing: a topology run over archived records, day by day, with the results of the live app.

Live, a worker polls records and its stream thread hands them to tasks; here a day's records come from the
archive, in offset order per partition, and go to the same tasks (:class:`~streaming.runtime.task.StreamTask`,
its :class:`~streaming.runtime.partition_group.PartitionGroup`, the test driver's commit path): no operator is
implemented twice. This package needs no Spark; the platform's ``reprocessed/<app>`` asset (``assets/reprocess``)
runs the same functions one Spark partition per task.

- :mod:`streaming.batch.plan` — the tasks and stages of a topology, and what batch refuses;
- :mod:`streaming.batch.task_runner` — one task over its records, from and to the state of consecutive runs;
- :mod:`streaming.batch.merge` — the order of records several tasks write to one partition;
- :mod:`streaming.batch.day` — a day's records (the frontier) and every stage over them in one process.
"""

from streaming.batch.day import DayResult, DayState, route, run_day, select_day, task_inputs
from streaming.batch.merge import merge_partition
from streaming.batch.plan import BatchPlan, BatchPlanError, TaskSpec
from streaming.batch.records import BatchOutput, BatchRecord
from streaming.batch.task_runner import (
    StoreRow,
    TaskResult,
    TaskState,
    batch_config,
    check_tasks,
    run_task,
    scratch_dir,
)

__all__ = ["BatchOutput", "BatchPlan", "BatchPlanError", "BatchRecord", "DayResult", "DayState", "StoreRow",
           "TaskResult", "TaskSpec", "TaskState", "batch_config", "check_tasks", "merge_partition", "route", "run_day",
           "run_task", "scratch_dir", "select_day", "task_inputs"]
