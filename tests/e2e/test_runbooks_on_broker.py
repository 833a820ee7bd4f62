"""Runbooks run as written from the state they create or name (issue 20, item 8), the ones that need only the
embedded broker and workers (``tests/e2e/test_runbook_states.py`` has the archive and compaction runbooks, which
need Spark and Dagster):

- platform/runbooks/embedded-broker.md: its Start, Status and Stop blocks; ``--port`` on a free port instead of
  9092, ``--foreground`` in the background, stopped with SIGTERM.
- platform/runbooks/dead-letters.md: its "Starting state" (the orders pipeline with the ``dead_letter`` handlers
  and an order that is not JSON), then its Inspect and Replay blocks.
- platform/runbooks/idle-source.md: its "Starting state" on that broker (the orders worker with a 5 s idle
  timeout), the alert, the topic's ends, an order, the ``resumed`` alert.
- platform/runbooks/restore-lost-worker.md: its "Starting state" (the word count of the archive runbook's "Start
  here", its worker with its own ``state.dir``, killed with SIGKILL), then "Bring the worker back".
- platform/runbooks/rebalances.md: its "Starting state" (that word count's worker in two terminals), then its
  check ``brook status wordcount``.
- platform/runbooks/exactly-once.md: its worker line on the dead-letters state (``apps/orders/config.yaml`` for the
  production file), ``brook status``, then its ``init_transactions`` line after the worker is SIGKILLed.

Each test has its own broker workdir, state directories (``TMPDIR``) and no broker address in the environment:
the commands find the broker as a user's would (``BROOK_BROKER_WORKDIR`` stands for the checkout's
``.brook/broker``).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.e2e.test_runbook_states import BIN, ROOT, RUNBOOKS, sh_blocks, shell

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def section(runbook: str, heading: str) -> str:
    """The text of ``runbook`` from ``heading`` to the next heading of its level."""
    text = (RUNBOOKS / runbook).read_text()
    start = text.index(heading)
    level = heading.split(" ", 1)[0] + " "
    end = text.find("\n" + level, start + len(heading))
    return text[start:] if end < 0 else text[start:end]


def environment(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BROOK_", "DAGSTER_"))}
    env.update(BROOK_BROKER_WORKDIR=str(tmp_path / "broker"), TMPDIR=str(tmp_path), **extra)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"  # the blocks that say `brook`: the installed command
    return env


@contextmanager
def background(code: str, env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``code`` run by bash in a session of its own, its output in ``log``; SIGINT (Ctrl-C) at the end if it still
    runs (and SIGKILL if that does not stop it in 60 s)."""
    with log.open("ab") as out:
        process = subprocess.Popen(["bash", "-c", "set -euo pipefail\n" + code.replace(".venv/bin", BIN)], cwd=ROOT,
                                   env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGINT)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)


def wait_for(what: str, found: Callable[[], bool], process: subprocess.Popen[bytes] | None = None,
             log: Path | None = None, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not found():
        tail = log.read_text(errors="replace")[-3000:] if log is not None and log.exists() else ""
        assert process is None or process.poll() is None, f"exited with {process.returncode} before {what}:\n{tail}"
        assert time.monotonic() < deadline, f"no {what} in {timeout:.0f} s:\n{tail}"
        time.sleep(0.5)


def logged(log: Path, text: str) -> Callable[[], bool]:
    return lambda: log.exists() and text in log.read_text(errors="replace")


def stop_broker(env: dict[str, str]) -> None:
    shell(".venv/bin/brook broker stop", env, check=False, timeout=60)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_embedded_broker_runbook(tmp_path: Path) -> None:
    [start] = sh_blocks(section("embedded-broker.md", "## Start\n"))
    [status] = sh_blocks(section("embedded-broker.md", "## Status"))
    [stop] = sh_blocks(section("embedded-broker.md", "## Stop"))
    env = environment(tmp_path)
    plain, fixed, foreground, export = [line for line in start.splitlines() if line.strip() and not line.startswith("#")]
    assert "--port 9092" in fixed and "--foreground" in foreground and export.startswith("export")
    try:
        # Each of the Start block's ways, from a stopped broker; then Status and Stop.
        started = shell(plain, env, timeout=120)
        address = started.stdout.strip()
        assert re.fullmatch(r"127\.0\.0\.1:\d+", address), started.stdout
        assert shell(plain, env).stdout.strip() == address  # starting again prints the running broker's address
        running = shell(status, env)
        assert address in running.stdout and "memory://" in running.stdout, running.stdout
        shell(stop, env, timeout=60)
        assert shell(status, env, check=False).returncode == 1
        assert not (tmp_path / "broker" / "broker.pid").exists() and (tmp_path / "broker" / "broker.log").exists()

        port = free_port()  # 9092 may be taken on a shared machine
        assert shell(fixed.replace("9092", str(port)), env, timeout=120).stdout.strip() == f"127.0.0.1:{port}"
        shell(stop, env, timeout=60)

        exported = shell(export + '\necho "$BROOK_BOOTSTRAP_SERVERS"', env, timeout=120).stdout.strip()
        assert re.fullmatch(r"127\.0\.0\.1:\d+", exported), exported
        shell(stop, env, timeout=60)

        log = tmp_path / "foreground.log"
        with background(foreground.split("#")[0], env, log) as attached:
            wait_for("running broker", lambda: shell(status, env, check=False).returncode == 0, attached, log)
            os.killpg(attached.pid, signal.SIGTERM)
            assert attached.wait(timeout=60) == 0, log.read_text()
        assert shell(status, env, check=False).returncode == 1
    finally:
        stop_broker(env)


def test_the_dead_letter_and_idle_source_runbooks(tmp_path: Path) -> None:
    state, bad_record = sh_blocks(section("dead-letters.md", "## Starting state"))
    [inspect] = sh_blocks(section("dead-letters.md", "## 2. Inspect"))
    [replay] = sh_blocks(section("dead-letters.md", "## 3. Fix, then replay"))
    idle_worker, alerts, resend = sh_blocks(section("idle-source.md", "## Starting state"))
    assert "brook worker run" in state and "brook worker run" in idle_worker
    env = environment(tmp_path)
    worker_at = state.index(".venv/bin/brook worker run")
    try:
        log = tmp_path / "dead-letters-worker.log"
        with background(state[:worker_at] + "exec " + state[worker_at:], env, log) as worker:
            wait_for("RUNNING worker", logged(log, "state REBALANCING -> RUNNING"), worker, log, timeout=120)
            shell(bad_record, env)
            wait_for("dead letter", logged(log, "sent to the dead-letter topic"), worker, log)

            done = shell(inspect, env)
            inspected = done.stdout + done.stderr
            assert inspected.count("not json") >= 2, inspected  # the two consume lines
            assert "would replay orders-dlq[0]@0 -> orders[" in inspected and "deserialization" in inspected
            assert inspected.count("would replay 1 dead letters from orders-dlq (0 replayed before") == 2, inspected

            done = shell(replay, env)
            summaries = [line for line in done.stderr.splitlines() if "dead letters from orders-dlq" in line]
            assert [line.split(" (")[0] for line in summaries] == [
                "would replay 1 dead letters from orders-dlq", "replayed 0 dead letters from orders-dlq",
                "replayed 0 dead letters from orders-dlq", "replayed 1 dead letters from orders-dlq"], done.stderr
            assert "1 not matching the filter" in summaries[1] and "1 not matching the filter" in summaries[2]
            # the replayed order is still not JSON: a new dead letter (the runbook's "fails again after replay")
            wait_for("second dead letter", lambda: log.read_text().count("sent to the dead-letter topic") == 2,
                     worker, log)

        # idle-source.md: the orders worker of that state (its topics; a key of its own here) with a 5 s timeout
        idle_env = {**env, "BROOK_ORDERS_KEY_K1": "QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUE="}
        log = tmp_path / "idle-worker.log"
        with background(idle_worker, idle_env, log) as worker:
            wait_for("idle alert", logged(log, "source topic orders is idle"), worker, log, timeout=120)
            assert '"state": "idle"' in shell(alerts, idle_env).stdout
            ends = shell(".venv/bin/brook topics describe orders", idle_env).stdout
            assert "topic orders: 4 partitions" in ends, ends
            shell(resend, idle_env)
            wait_for("resumed alert", lambda: '"state": "resumed"' in shell(alerts, idle_env).stdout, worker, log)
    finally:
        stop_broker(env)


def test_the_restore_lost_worker_runbook(tmp_path: Path) -> None:
    archive = sh_blocks(section("archive-and-quality.md", "## Start here"))
    start, inspect = archive[0], archive[1]
    [state] = sh_blocks(section("restore-lost-worker.md", "## Starting state"))
    [bring_back] = sh_blocks(section("restore-lost-worker.md", "## Bring the worker back"))
    state_dirs = tmp_path / "var-lib-brook"
    env = environment(tmp_path)
    [archive_worker] = [line for line in start.splitlines() if "brook worker run" in line]
    first = state.replace("\\\n", " ").splitlines()[0].split(" &")[0].replace("/var/lib/brook", str(state_dirs))
    assert "kill -9 %1" in state and "state.dir=/var/lib/brook/worker-1" in bring_back
    try:
        shell(start.replace(archive_worker, ""), env, timeout=120)
        log = tmp_path / "worker-1.log"
        with background(first, env, log) as worker:
            wait_for("counts", lambda: re.search(r"\bbe\s+3\s*$", shell(inspect, env, check=False).stdout,
                                                 re.MULTILINE) is not None, worker, log)
            os.killpg(worker.pid, signal.SIGKILL)  # kill -9 %1
            worker.wait(timeout=30)
        assert (state_dirs / "worker-1" / "wordcount").is_dir()

        log = tmp_path / "worker-1-again.log"
        with background(bring_back.replace("/var/lib/brook", str(state_dirs)), env, log) as worker:
            wait_for("RUNNING worker", logged(log, "state REBALANCING -> RUNNING"), worker, log, timeout=120)
            text = log.read_text()  # after a crash: no checkpoint, the stores wiped and restored from the changelog
            assert "no checkpoint for store 'word-counts', wiping local state" in text, text[-3000:]
            assert "restored store 'word-counts'" in text, text[-3000:]
            assert re.search(r"\bbe\s+3\s*$", shell(inspect, env).stdout, re.MULTILINE)
        assert worker.returncode == 0, log.read_text()[-3000:]
    finally:
        stop_broker(env)


def test_the_rebalances_runbook_checks_two_workers(tmp_path: Path) -> None:
    """platform/runbooks/rebalances.md: its "Starting state" (the archive runbook's word count, the worker line in
    two terminals), then its check ``brook status wordcount``: both workers, every input partition owned."""
    start = sh_blocks(section("archive-and-quality.md", "## Start here"))[0]
    [worker_line] = sh_blocks(section("rebalances.md", "## Starting state"))
    [archive_worker] = [line for line in start.splitlines() if "brook worker run" in line]
    assert "brook status wordcount" in section("rebalances.md", "## Checks")
    env = environment(tmp_path)
    try:
        shell(start.replace(archive_worker, ""), env, timeout=120)
        logs = [tmp_path / "worker-a.log", tmp_path / "worker-b.log"]
        worker_line = worker_line.split("#")[0]
        with background(worker_line, env, logs[0]) as first, background(worker_line, env, logs[1]) as second:
            for worker, log in ((first, logs[0]), (second, logs[1])):
                wait_for("RUNNING worker", logged(log, "state REBALANCING -> RUNNING"), worker, log, timeout=120)

            def both_listed() -> bool:
                status = shell(".venv/bin/brook status wordcount", env, check=False).stdout
                return re.search(r"instances \(2\b", status) is not None
            wait_for("two instances in brook status", both_listed, first, logs[0], timeout=90)
            dirs = {re.search(r"state\.dir (\S+):", log.read_text()).group(1) for log in logs}
            assert len(dirs) == 2, dirs  # each took a state directory of its own
        assert first.returncode == 0 and second.returncode == 0
    finally:
        stop_broker(env)


def test_the_exactly_once_runbook_worker_and_its_unblocking_producer(tmp_path: Path) -> None:
    """platform/runbooks/exactly-once.md on the state it names for the embedded broker: the dead-letters runbook's
    (the orders topics, a key), its worker line with ``apps/orders/config.yaml`` for the production file. The
    worker's transactional id is ``<application.id>-<instance.name>-<thread>``; after a SIGKILL, the runbook's
    ``init_transactions`` line with that id runs (what unblocks a read_committed reader)."""
    text = (RUNBOOKS / "exactly-once.md").read_text()
    worker_line = sh_blocks(text)[0].replace("apps/orders/config.prod.yaml", "apps/orders/config.yaml")
    [unblock] = sh_blocks(section("exactly-once.md", "## read_committed readers"))
    state = sh_blocks(section("dead-letters.md", "## Starting state"))[0]
    env = environment(tmp_path)
    try:
        made = shell(state[:state.index(".venv/bin/brook worker run")] + 'echo "key=$BROOK_ORDERS_KEY_K1"', env,
                     timeout=180).stdout
        env["BROOK_ORDERS_KEY_K1"] = made.rsplit("key=", 1)[1].strip()
        log = tmp_path / "exactly-once-worker.log"
        with background(worker_line, env, log) as worker:
            wait_for("RUNNING worker", logged(log, "state REBALANCING -> RUNNING"), worker, log, timeout=120)
            assert "transactional producer 'orders-orders-worker-3-1' initialized" in log.read_text(), \
                log.read_text()[-3000:]
            status = shell(".venv/bin/brook status orders", env).stdout
            assert "orders-worker-3" in status, status
            os.killpg(worker.pid, signal.SIGKILL)  # a dead instance: whatever it had open stays open
            worker.wait(timeout=30)
        bootstrap = shell(".venv/bin/brook broker start", env).stdout.strip()
        shell(unblock.replace("HOST:PORT", bootstrap).replace("THE-ID", "orders-orders-worker-3-1"), env, timeout=120)
    finally:
        stop_broker(env)
