"""What a newcomer and an on-call operator do, through the installed ``brook`` command in a folder of their own
(outside the repository): run their own app with a broker started in another process and no environment
variables; and the run-time failures that must be one line naming the fix (a poison record, a changelog that is
gone, a state.dir another worker holds), with the traceback only under ``--debug``. Each failure test prints the
wall time it took (``pytest -s``)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from streaming import Serdes
from streaming.admin import create_topics, delete_topics
from streaming.cli.worker_state import slots_dir
from streaming.testing.generators import GeneratedRecord
from streaming.testing.kafka import produce, read_topic, wait_for

pytestmark = pytest.mark.integration
BROOK = str(Path(sys.executable).parent / "brook")  # the installed console script
ROOT = Path(__file__).resolve().parents[2]

MYAPP = '''
from streaming import Serdes, StreamsBuilder

builder = StreamsBuilder()
(builder.stream("{source}", key_serde=Serdes.String(), value_serde=Serdes.String())
 .map_values(lambda line: line.upper())
 .to("{sink}", key_serde=Serdes.String(), value_serde=Serdes.String()))
topology = builder.build()
'''

COUNTER = '''
from streaming import Serdes, StreamsBuilder

builder = StreamsBuilder()
(builder.stream("{source}", key_serde=Serdes.String(), value_serde=Serdes.Json())
 .group_by_key().count(materialized="n").to_stream().to("{sink}", value_serde=Serdes.Long()))
topology = builder.build()
'''


def clean_environment(**extra: str) -> dict[str, str]:
    """The environment of a fresh shell: nothing about Brook, the broker or the import path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BROOK_") and k != "PYTHONPATH"}
    return {**env, **extra}


def brook(cwd: Path, *args: str, env: dict[str, str] | None = None, stdin: str | None = None,
          timeout: float = 120) -> tuple[int, str, str, float]:
    """Run the installed ``brook ARGS`` in ``cwd``: exit code, stdout, stderr, seconds."""
    started = time.monotonic()
    result = subprocess.run([BROOK, *args], check=False, cwd=cwd, input=stdin, capture_output=True, text=True,
                            timeout=timeout, env=env or clean_environment())
    return result.returncode, result.stdout, result.stderr, time.monotonic() - started


def start_worker(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([BROOK, "worker", "run", *args], cwd=cwd, env=env or clean_environment(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def stop_worker(worker: subprocess.Popen[str]) -> str:
    """SIGINT (Ctrl-C), wait, and return its stderr."""
    if worker.poll() is None:
        worker.send_signal(signal.SIGINT)
    try:
        _, err = worker.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        worker.kill()
        _, err = worker.communicate()
    return err


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def assert_one_line_naming(code: int, stderr: str, *needles: str) -> str:
    assert code != 0, stderr
    assert "Traceback" not in stderr, stderr
    errors = error_lines(stderr)
    assert len(errors) == 1, stderr
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])
    return errors[0]


@pytest.fixture
def own_app_id(unique_name: str) -> Iterator[str]:
    """An application id whose numbered state directories are removed afterwards."""
    yield f"{unique_name}-app"
    shutil.rmtree(slots_dir(f"{unique_name}-app"), ignore_errors=True)


def test_a_newcomer_runs_their_own_app_from_their_own_folder(tmp_path: Path, own_app_id: str) -> None:
    folder = tmp_path / "newcomer"
    folder.mkdir()
    assert not folder.resolve().is_relative_to(ROOT)
    (folder / "myapp.py").write_text(MYAPP.format(source="lines", sink="shouted"))
    (folder / "config.yaml").write_text(f"application.id: {own_app_id}\n")
    code, out, err, _ = brook(folder, "broker", "start")  # the first terminal
    assert code == 0, err
    try:
        bootstrap = out.strip()
        for topic in ("lines", "shouted"):
            assert brook(folder, "topics", "create", topic, "--partitions", "2")[0] == 0
        code, _, err, _ = brook(folder, "produce", "lines", "--value-serde", "String",
                                stdin="a\tto be or not to be\nb\tbe quick\n")
        assert code == 0, err
        worker = start_worker(folder, "myapp:topology", "--config", "config.yaml")  # the second terminal
        try:
            wait_for(lambda: len(read_topic(bootstrap, "shouted", Serdes.String(), Serdes.String(), 2,
                                            timeout=2)) == 2, 90, "the app's output")
        finally:
            err = stop_worker(worker)
        assert worker.returncode == 0, err
        first = err.splitlines()[0]
        assert "connecting to bootstrap.servers=" + bootstrap in first
        assert "from the embedded broker in .brook/broker" in first
        assert f"state.dir {slots_dir(own_app_id)}/0" in err
        code, out, _, _ = brook(folder, "consume", "shouted", "--from-beginning", "--value-serde", "String")
        assert sorted(line.split("\t")[1] for line in out.splitlines()) == ["BE QUICK", "TO BE OR NOT TO BE"]
    finally:
        brook(folder, "broker", "stop")


def test_a_poison_record_is_one_line_naming_it_and_the_handler_and_a_repeat_says_so(
        bootstrap: str, tmp_path: Path, own_app_id: str) -> None:
    source, sink = f"{own_app_id}-in", f"{own_app_id}-out"
    create_topics(bootstrap, {source: 1, sink: 1})
    produce(bootstrap, source, [GeneratedRecord("k", b'{"n": 1}', 1_000), GeneratedRecord("k", b"not json", 2_000)],
            Serdes.String(), Serdes.Bytes())
    (tmp_path / "counter.py").write_text(COUNTER.format(source=source, sink=sink))
    env = clean_environment(BROOK_BOOTSTRAP_SERVERS=bootstrap)
    args = ("worker", "run", "counter:topology", "--set", f"application.id={own_app_id}")
    code, _, err, seconds = brook(tmp_path, *args, env=env)
    print(f"poison record: one line in {seconds:.1f} s")
    line = assert_one_line_naming(code, err, f"topic={source}, partition=0, offset=1",
                                  "default.deserialization.exception.handler: dead_letter")
    assert "failed the same way" not in line
    code, _, err, _ = brook(tmp_path, *args, env=env)
    assert_one_line_naming(code, err, "offset=1", "This worker failed the same way at")
    code, _, err, _ = brook(tmp_path, "--debug", *args, env=env)
    assert code != 0 and "Traceback" in err


def test_a_changelog_that_is_gone_is_one_line_naming_the_cleanup_command(
        bootstrap: str, tmp_path: Path, own_app_id: str) -> None:
    source, sink = f"{own_app_id}-in", f"{own_app_id}-out"
    create_topics(bootstrap, {source: 1, sink: 1})
    produce(bootstrap, source, [GeneratedRecord("k", {"n": i}, 1_000 * i) for i in (1, 2)], Serdes.String(),
            Serdes.Json())
    (tmp_path / "counter.py").write_text(COUNTER.format(source=source, sink=sink))
    env = clean_environment(BROOK_BOOTSTRAP_SERVERS=bootstrap)
    args = ("counter:topology", "--set", f"application.id={own_app_id}", "--set", f"state.dir={tmp_path / 'w1'}")
    worker = start_worker(tmp_path, *args, env=env)
    try:
        wait_for(lambda: len(read_topic(bootstrap, sink, Serdes.String(), Serdes.Long(), 1, timeout=2)) >= 1, 90,
                 "the count")
    finally:
        stop_worker(worker)
    delete_topics(bootstrap, [f"{own_app_id}-n-changelog"])  # as a new broker, or a reset, would leave it
    code, _, err, seconds = brook(tmp_path, "worker", "run", *args, env=env)
    print(f"missing changelog: one line in {seconds:.1f} s")
    line = assert_one_line_naming(code, err, f"{own_app_id}-n-changelog[0]", "brook worker cleanup")
    code, _, err, _ = brook(tmp_path, "worker", "run", *args, env=env)  # the failed restore used up the checkpoint
    assert_one_line_naming(code, err, "brook worker cleanup", "this worker stopped so at")
    cleanup = line.split("delete the old local state: ", 1)[1].split()
    assert cleanup[:3] == ["brook", "worker", "cleanup"]
    code, out, err, _ = brook(tmp_path, *cleanup[1:], env=env)
    assert code == 0 and f"deleted the local state of '{own_app_id}' in {tmp_path / 'w1'}" in out, err


def test_a_state_dir_held_by_another_worker_is_one_line_naming_the_fix(
        bootstrap: str, tmp_path: Path, own_app_id: str) -> None:
    source, sink = f"{own_app_id}-in", f"{own_app_id}-out"
    create_topics(bootstrap, {source: 1, sink: 1})
    (tmp_path / "counter.py").write_text(COUNTER.format(source=source, sink=sink))
    env = clean_environment(BROOK_BOOTSTRAP_SERVERS=bootstrap)
    args = ("counter:topology", "--set", f"application.id={own_app_id}", "--set", f"state.dir={tmp_path / 'shared'}")
    first = start_worker(tmp_path, *args, env=env)
    try:
        wait_for(lambda: (tmp_path / "shared" / own_app_id / ".lock").is_file(), 60, "the first worker's lock")
        code, _, err, seconds = brook(tmp_path, "worker", "run", *args, env=env)
        print(f"state.dir held by another worker: one line in {seconds:.1f} s")
        assert_one_line_naming(code, err, f"pid {first.pid}", "state.dir of its own")
        assert first.poll() is None
    finally:
        stop_worker(first)


def test_data_commands_explain_bad_input_and_show_undecodable_records(bootstrap: str, tmp_path: Path,
                                                                      unique_name: str) -> None:
    topic = f"{unique_name}-data"
    env = clean_environment(BROOK_BOOTSTRAP_SERVERS=bootstrap)
    assert brook(tmp_path, "topics", "create", topic, env=env)[0] == 0
    code, _, err, _ = brook(tmp_path, "produce", topic, stdin="k\thello world\n", env=env)
    assert code != 0 and "'hello world' is not JSON" in err and "--value-serde String" in err, err
    produce(bootstrap, topic, [GeneratedRecord("a", b'{"n": 1}', 1_000), GeneratedRecord("b", b"\xffraw", 2_000),
                               GeneratedRecord("c", b'{"n": 3}', 3_000)], Serdes.String(), Serdes.Bytes())
    code, out, err, _ = brook(tmp_path, "consume", topic, "--from-beginning", env=env)
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 3 and lines[0].endswith('{"n": 1}') and lines[2].endswith('{"n": 3}'), lines
    assert lines[1].startswith("p0 @1 undecodable (") and "value b'\\xffraw'" in lines[1], lines
    assert "1 of 3 records could not be decoded" in err
    code, _, err, _ = brook(tmp_path, "topics", "create", "bad/name", env=env)
    assert code != 0 and "'bad/name' is not a legal topic name" in err
    code, _, err, _ = brook(tmp_path, "topics", "list", "--set", "bootstrap.server=x:1", env=env)
    assert code != 0 and "unknown config key 'bootstrap.server': did you mean 'bootstrap.servers'?" in err
