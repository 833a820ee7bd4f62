"""``brook worker run`` processes for integration tests and benchmarks: each started with a state directory and a
log of its own, and stopped the way a rolling stop does (one after the other: SIGTERM, then a kill if it does not
exit)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

__all__ = ["start_worker", "stop_workers"]


def start_worker(bootstrap: str, target: str, config: Path, workdir: Path, index: int, project: Path,
                 settings: Mapping[str, object] | None = None, prefix: Sequence[str] = ()) -> subprocess.Popen[bytes]:
    """``brook worker run target --config config`` with ``state.dir`` ``workdir/state-<index>``, its output appended
    to ``workdir/worker-<index>.log``; run in ``project`` (which is put on the import path, so ``target`` may name
    a module of it), with ``settings`` as ``--set`` overrides, after ``prefix`` (e.g. a network namespace's
    ``ip netns exec NAME``: :meth:`streaming.testing.netns.Host.command`)."""
    chosen = {"bootstrap.servers": bootstrap, "state.dir": str(workdir / f"state-{index}"), **(settings or {})}
    overrides = [arg for key, value in chosen.items() for arg in ("--set", f"{key}={value}")]
    log = (workdir / f"worker-{index}.log").open("ab")
    return subprocess.Popen(
        [*prefix, sys.executable, "-m", "streaming.cli.main", "worker", "run", target, "--config", str(config), *overrides],
        cwd=project, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(project)})


def stop_workers(workers: Iterable[subprocess.Popen[bytes]], timeout_s: float = 60.0) -> None:
    """Stop the workers one after the other, as a rolling stop does: SIGTERM, wait up to ``timeout_s``, kill it if it
    has not exited, then the next. (Members leaving the embedded broker's group at the same instant can leave the
    group without a leader for the next members: docs/broker-limits.md.)"""
    for worker in workers:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout_s)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
