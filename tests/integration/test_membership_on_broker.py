"""Who is running, on the embedded broker (issue 17, item 1): a worker without ``application.server`` announces
itself from start to close, ``brook status`` and :func:`live_workers` name it (host and pid), a clean stop takes it
back at once (a tombstone), and a SIGKILLed one counts as alive until the bound after it was last seen. The
embedded broker's DescribeGroups lists no members, so the announcements are all there is to go by."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from streaming.admin import create_topics
from streaming.runtime.membership import group_members, live_workers
from streaming.testing.kafka import wait_for

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def worker(bootstrap: str, app_id: str, tmp_path: Path, name: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "streaming.cli.main", "worker", "run", "apps.wordcount:topology",
         "--config", str(ROOT / "apps/wordcount/config.yaml"), "--set", f"bootstrap.servers={bootstrap}",
         "--set", f"application.id={app_id}", "--set", f"state.dir={tmp_path / name}", "--instance-name", name],
        cwd=ROOT, stdout=(tmp_path / f"{name}.log").open("wb"), stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(ROOT)})


def status(bootstrap: str, app_id: str) -> str:
    done = subprocess.run([sys.executable, "-m", "streaming.cli.main", "status", app_id, "-b", bootstrap], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=True)
    return done.stdout


def claimed(shown: str) -> list[int]:
    """The wordcount-lines partitions ``brook status`` shows on the instances' lines."""
    found = re.findall(r"partitions [^;]*\bwordcount-lines\[([0-9,]+)\]", shown)
    return sorted(int(p) for group in found for p in group.split(","))


def test_every_worker_announces_itself_until_it_stops(bootstrap: str, unique_name: str, tmp_path: Path) -> None:
    create_topics(bootstrap, {"wordcount-lines": 4, "wordcount-words": 4, "wordcount-counts": 4})
    config = {"bootstrap.servers": bootstrap}
    workers = {name: worker(bootstrap, unique_name, tmp_path, name) for name in ("w1", "w2")}
    try:
        wait_for(lambda: len(live_workers(config, unique_name)) == 2, 60, "both workers to announce themselves")
        alive = [worker.name for worker in live_workers(config, unique_name)]
        host = socket.gethostname()
        for name, process in workers.items():  # keyed instance-<process id>: no application.server
            [line] = [line for line in alive if line.endswith(f" (host {host}, pid {process.pid}, instance.name {name})")]
            assert line.startswith("instance-")
        assert group_members(config, unique_name) == []  # the embedded broker lists no members
        shown = status(bootstrap, unique_name)
        assert "instances (2, as announced on" in shown
        assert all(f"pid {process.pid}, instance.name {name})" in shown for name, process in workers.items())
        # Without application.server: each worker's partitions on its line, and each input partition's owner.
        wait_for(lambda: claimed(status(bootstrap, unique_name)) == [0, 1, 2, 3], 60,
                 "the workers to announce their partitions")
        shown = status(bootstrap, unique_name)
        assert len(re.findall(r"partitions [^;]*\bwordcount-lines\[", shown)) == 2, shown  # both have some
        owners = [line for line in shown.splitlines() if line.startswith("wordcount-lines[")]
        assert len(owners) == 4 and all(line.split()[-1].startswith("instance-") for line in owners), shown

        workers["w1"].send_signal(signal.SIGTERM)  # a clean stop: its tombstone takes it back at once
        assert workers["w1"].wait(60) == 0
        [left] = live_workers(config, unique_name)
        assert f"pid {workers['w2'].pid}" in left.name

        workers["w2"].send_signal(signal.SIGKILL)  # no tombstone: alive until the bound after it was last seen
        workers["w2"].wait(10)
        killed_at = time.monotonic()
        [ghost] = live_workers(config, unique_name, stale_after_s=4)
        assert f"pid {workers['w2'].pid}" in ghost.name and ghost.last_seen_s is not None
        assert "if it was killed, it counts as stopped in" in ghost.describe()
        wait_for(lambda: live_workers(config, unique_name, stale_after_s=4) == [], 20,
                 "the killed worker to count as stopped")
        assert time.monotonic() - killed_at <= 4 + 5  # the bound, plus reading the announcements on a busy machine
        assert len(live_workers(config, unique_name)) == 1  # with the real bound (60 s) it still counts as alive
    finally:
        for process in workers.values():
            if process.poll() is None:
                process.kill()


def test_an_instance_counts_as_alive_as_soon_as_start_returns(bootstrap: str, unique_name: str, tmp_path: Path) -> None:
    """start() waits for the first announcement: a reset or a scaling run right after a worker said it started
    (it logs that when start() returned) finds it, without waiting for the publisher's thread."""
    from apps.wordcount import topology
    from streaming import KafkaStreams

    create_topics(bootstrap, {"wordcount-lines": 4, "wordcount-words": 4, "wordcount-counts": 4})  # as the test above
    config = {"bootstrap.servers": bootstrap}
    streams = KafkaStreams(topology(), {"application.id": unique_name, "bootstrap.servers": bootstrap,
                                        "state.dir": str(tmp_path)})
    streams.start()
    try:
        alive = live_workers(config, unique_name)
        assert len(alive) == 1 and f"pid {os.getpid()}" in alive[0].name, alive
    finally:
        streams.close()
    assert live_workers(config, unique_name) == []  # the tombstone
