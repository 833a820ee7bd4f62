"""The lock of ``state.dir/<application.id>`` (issue 16, item 8): one holder at a time, in one process too; a
refusal names the directory, the holder's pid and the fix; a SIGKILLed holder leaves its pid in the lock file
but not the lock; a refused instance or driver opens, wipes and writes nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from streaming import KafkaStreams, Serdes, StateDirectoryLockedError, Stores, StreamsBuilder, Topology
from streaming.processor import Processor, Record
from streaming.runtime.directory_lock import LOCK_FILE, lock_owner, try_lock_directory
from streaming.runtime.kafka_streams import State
from streaming.runtime.state_directory import has_persistent_stores, lock_application_dir
from streaming.testing import TopologyTestDriver

APP = "app"
HOLDER = """
import sys, time
from streaming.runtime.state_directory import lock_application_dir
lock = lock_application_dir(sys.argv[1], sys.argv[2])
print("locked", flush=True)
time.sleep(120)
"""


class Counter(Processor):
    def init(self, context) -> None:
        self.store = context.get_state_store("counts")

    def process(self, record: Record) -> None:
        self.store.put(record.key, (self.store.get(record.key) or 0) + 1)


def counting(persistent: bool = True) -> Topology:
    supplier = Stores.persistent_key_value_store("counts") if persistent else Stores.in_memory_key_value_store("counts")
    return (Topology().add_source("src", "in", key_serde=Serdes.String(), value_serde=Serdes.String())
            .add_processor("count", Counter, "src")
            .add_state_store(Stores.key_value_store_builder(supplier, Serdes.String(), Serdes.Long()), "count"))


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holding the lock of ``tmp_path/<APP>``."""
    process = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path), APP], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "locked"
        yield process
    finally:
        process.kill()
        process.wait(10)


def test_one_open_holds_the_lock_even_within_a_process(tmp_path: Path) -> None:
    first = try_lock_directory(str(tmp_path / APP))
    assert first is not None and first.held
    assert try_lock_directory(str(tmp_path / APP)) is None  # a second open of this process: refused
    owner = lock_owner(str(tmp_path / APP))
    assert owner is not None and owner.pid == os.getpid() and owner.is_this_process
    with pytest.raises(StateDirectoryLockedError) as refused:
        lock_application_dir(str(tmp_path), APP)
    assert f"another KafkaStreams instance of this process (pid {os.getpid()})" in str(refused.value)
    first.release()
    first.release()  # again: nothing
    again = try_lock_directory(str(tmp_path / APP))
    assert again is not None
    again.release()


def test_a_refusal_is_one_line_naming_the_directory_the_holder_and_the_fix(
        tmp_path: Path, holder: subprocess.Popen[str]) -> None:
    with pytest.raises(StateDirectoryLockedError) as refused:
        lock_application_dir(str(tmp_path), APP)
    message = str(refused.value)
    assert "\n" not in message
    assert f"state directory {tmp_path / APP} is in use by another process (pid {holder.pid})" in message
    assert "Give each worker a state.dir of its own" in message


def test_a_sigkilled_holder_leaves_its_pid_but_not_the_lock(tmp_path: Path, holder: subprocess.Popen[str]) -> None:
    assert try_lock_directory(str(tmp_path / APP)) is None
    holder.send_signal(signal.SIGKILL)
    holder.wait(10)
    stale = lock_owner(str(tmp_path / APP))
    assert stale is not None and stale.pid == holder.pid  # a pid file alone would block here
    lock = lock_application_dir(str(tmp_path), APP)
    try:
        owner = lock_owner(str(tmp_path / APP))
        assert owner is not None and owner.pid == os.getpid()
    finally:
        lock.release()


def test_a_refused_instance_opens_wipes_and_writes_nothing(tmp_path: Path, holder: subprocess.Popen[str]) -> None:
    """start() locks first: the broker is never asked (there is none at 127.0.0.1:1) and the holder's files,
    a store without a checkpoint among them (which an opening task would wipe), stay as they are."""
    store = tmp_path / APP / "0_0" / "counts"
    store.mkdir(parents=True)
    (store / "000012.sst").write_bytes(b"the holder's data")
    before = sorted((p.relative_to(tmp_path), p.stat().st_mtime_ns) for p in tmp_path.rglob("*"))
    app = KafkaStreams(counting(), {"application.id": APP, "bootstrap.servers": "127.0.0.1:1",
                                    "state.dir": str(tmp_path)})
    with pytest.raises(StateDirectoryLockedError, match=f"pid {holder.pid}"):
        app.start()
    assert app.state is State.NOT_RUNNING
    with pytest.raises(StateDirectoryLockedError):
        app.cleanup()
    with pytest.raises(StateDirectoryLockedError):
        TopologyTestDriver(counting(), {"application.id": APP, "state.dir": str(tmp_path)})
    assert sorted((p.relative_to(tmp_path), p.stat().st_mtime_ns) for p in tmp_path.rglob("*")) == before


def test_cleanup_takes_the_lock_and_keeps_the_lock_file(tmp_path: Path) -> None:
    (tmp_path / APP / "0_0" / "counts").mkdir(parents=True)
    (tmp_path / APP / "global").mkdir()
    app = KafkaStreams(counting(), {"application.id": APP, "bootstrap.servers": "127.0.0.1:1",
                                    "state.dir": str(tmp_path)})
    app.cleanup()
    assert os.listdir(tmp_path / APP) == [LOCK_FILE]
    assert try_lock_directory(str(tmp_path / APP)) is not None  # released


def test_a_driver_holds_its_state_dir_until_closed(tmp_path: Path) -> None:
    config = {"application.id": APP, "state.dir": str(tmp_path)}
    with TopologyTestDriver(counting(), config) as driver:
        driver.create_input_topic("in", Serdes.String(), Serdes.String()).pipe_input("k", "v", timestamp=1)
        with pytest.raises(StateDirectoryLockedError, match="this process"):
            TopologyTestDriver(counting(), config)
        assert driver.get_key_value_store("counts").get("k") == 1
    with TopologyTestDriver(counting(), config) as driver:  # closed: free again
        assert driver.get_key_value_store("counts").get("k") is None  # no checkpoint: wiped (the driver writes none)


def test_only_topologies_with_persistent_stores_lock(tmp_path: Path) -> None:
    """As Kafka Streams (``hasPersistentStores``): nothing on disk, no lock, so stateless instances and
    in-memory stores may share a state.dir."""
    stateless = StreamsBuilder()
    stateless.stream("in").filter(lambda k, v: True).to("out")
    assert not has_persistent_stores(stateless.build())
    assert not has_persistent_stores(counting(persistent=False))
    assert has_persistent_stores(counting())
    with_global = StreamsBuilder()
    with_global.global_table("users", materialized="users")
    with_global.stream("in").to("out")
    assert has_persistent_stores(with_global.build())
    config = {"application.id": APP, "state.dir": str(tmp_path)}
    with TopologyTestDriver(counting(persistent=False), config), TopologyTestDriver(counting(persistent=False), config):
        assert not (tmp_path / APP / LOCK_FILE).exists()
