"""The fault-injection run of tests/integration/test_fault_injection.py under exactly_once_v2: workers of the
counting app SIGKILLed at random points while input flows, each restarted at once under its own stable
``instance.name`` (so its ``init_transactions`` aborts the transaction the dead one left open, which the
embedded broker would otherwise keep open for good).

The same accounting applies (every input record in the output, a dead letter or a skip; final counts at
least the oracle's, any excess explained by records output twice). Under exactly-once on the embedded
broker, a record is output twice only when an aborted transaction's output stays visible (the broker does
not hide aborted records from read_committed readers), and a count can exceed the oracle's only when a
restore replayed an aborted transaction's changelog write (docs/broker-limits.md). The run prints both. A
transaction is aborted by a kill (the restarted worker's ``init_transactions``) or by a live worker that abandons
it (a failed commit, a fencing, lost partitions during a slow rebalance), whose warning names the input offsets it
held: every record output twice should be explained by one or the other. Runs of duplicates that neither explains
are an open defect (2026-11-28): the run then ends as an expected failure that names them and the kills' windows.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.integration import test_fault_injection as faults

pytestmark = [pytest.mark.integration, pytest.mark.slow]
RUN = faults.Run("eos-two-workers-standbys", workers=2, kills=8, standbys=1, seed=505)


@contextmanager
def environment(**values: str) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class ExactlyOnceWorkers(faults.Workers):
    """The fault-injection workers with ``processing.guarantee=exactly_once_v2`` and ``instance.name`` =
    ``<application.id>-w<slot>`` (``BROOK_<KEY>`` settings in the worker's environment)."""

    def _start(self, index: int) -> subprocess.Popen[bytes]:
        with environment(BROOK_PROCESSING_GUARANTEE="exactly_once_v2", BROOK_INSTANCE_NAME=f"{self.app_id}-w{index}"):
            return super()._start(index)


def test_random_sigkills_under_exactly_once(bootstrap: str, unique_name: str, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(faults, "Workers", ExactlyOnceWorkers)
    outcome = faults.inject_faults(RUN, bootstrap, unique_name, tmp_path)
    logs = "".join((tmp_path / RUN.name / f"worker-{i}.log").read_text(errors="replace") for i in range(RUN.workers))
    assert logs.count("transactional producer") >= RUN.kills + RUN.workers  # every life ran transactionally
    print(f"exactly-once fault injection: {outcome.kills} kills ({outcome.wipes} restarts on wiped state), "
          f"{outcome.records} records, {outcome.duplicates} outputs of aborted transactions visible, "
          f"{outcome.excess} counts above the oracle from restored aborted changelog writes, "
          f"{outcome.abort_explained_duplicates} duplicates from transactions a live worker abandoned, "
          f"{outcome.unexplained_duplicates} duplicates neither a kill nor an abandoned transaction explains")
    assert outcome.kills == RUN.kills
    if outcome.unexplained_duplicates:
        # An open defect, not yet explained (seen in 2 of 3 local runs on 2026-11-28, none abandoned by a live
        # worker): a run of consecutive input records, output by a transaction that was aborted although no kill
        # found them uncommitted and no worker logged abandoning it, then output again. Reported as an expected
        # failure with what it saw, so that every other check of this run still gates the suite.
        pytest.xfail(
            f"{outcome.unexplained_duplicates} input records output twice that no kill and no abandoned transaction "
            f"explains (partition, offset): {sorted(outcome.unexplained)[:40]}; committed/acknowledged input at each "
            f"kill: {list(zip(outcome.committed_at_kills, outcome.produced_at_kills, strict=True))}")
