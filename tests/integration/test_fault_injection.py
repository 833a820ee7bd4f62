"""Fault injection: workers of the counting app are SIGKILLed at random points while input flows, and
afterwards every input record is accounted for and the state agrees with the oracle.

Each run starts ``brook worker run`` processes of ``tests.integration.workloads.counting`` (own state
directories, a 200 ms commit interval, dead letters for records that cannot be processed, and for records
that cannot be read either dead letters or, in one run, skips with a warning), feeds
input from a thread at a steady rate (a few hundred keys, some poison values and some undecodable ones),
and on a seeded schedule SIGKILLs a worker and starts it again at once — sometimes on a wiped state
directory. After each restart the schedule waits until the group has committed a few hundred more records
(so every kill interrupts a group that recovered and makes progress), then kills after a random delay:
mostly once every worker is RUNNING again (the kill then lands mid-processing), sometimes without waiting
for that (it may hit a worker that is starting, joining or restoring). Once the input is fully committed
the workers stop with SIGTERM and the topics are checked:

* every decodable, non-poison input record's ``(partition, offset)`` is in the output at least once, under
  its key; every poison record is a ``processing`` dead letter, every undecodable one a
  ``deserialization`` dead letter (or, with ``log_and_continue``, named by a worker's skip warning);
  nothing else is in the output, the dead-letter topic or the warnings;
* the final count per key (the changelog's last value, which is what a fresh instance restores, and the
  last output of the key) is at least the oracle's count over the input, and what it exceeds it by is
  explained by records processed twice.

Why counts may exceed the oracle: under at-least-once, a commit flushes the stores — the changelog gets
each dirty key's latest count — waits for the producer, then commits the input offsets. A worker killed
after its changelog writes were acknowledged but before the offsets were committed leaves counts in the
changelog that cover records whose offsets are not committed; the next owner restores those counts and
processes the records again, counting them twice and emitting them again. A kill can also drop a record's
output while its changelog write got through: the producer keeps no order between partitions, so the commit's
flush may deliver the changelog's batch and not yet the sink's (Kafka Streams gives no such order either). The
record is then counted twice and output once. So a key's excess is at most, over its records, the extra
emissions of each or, if more, the number of kills that found it uncommitted (sent, not committed).
"""

from __future__ import annotations

import collections
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import Producer

from streaming.admin import create_topics
from streaming.naming import changelog_topic, dead_letter_topic
from streaming.runtime.dead_letters import error_headers
from streaming.serdes import Serdes
from streaming.testing.kafka import ConsumedRecord, committed_offsets, read_topic, wait_for
from tests.integration.workloads import counting

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 4
KEYS = 300
UNDECODABLE = b"\xff\xfe not UTF-8"
STATE_CHANGE = re.compile(r"state \w+ -> (\w+)")


@dataclass(frozen=True)
class Run:
    name: str
    workers: int
    kills: int
    standbys: int
    seed: int
    poison_rate: float = 0.004
    undecodable_rate: float = 0.003
    undecodable: str = "dead_letter"  # default.deserialization.exception.handler: dead_letter or log_and_continue


RUNS = (Run("three-workers", workers=3, kills=8, standbys=0, seed=101),
        Run("three-workers-standbys", workers=3, kills=8, standbys=1, seed=202),
        Run("two-workers-standbys", workers=2, kills=8, standbys=1, seed=303, undecodable="log_and_continue"))
RECORDS_PER_S = 400
PROGRESS = 200  # records the group commits after a restart before the next kill may come
KILL_DELAY_S = (0.2, 1.5)  # then the kill comes after a random delay, mid-processing
ANYTIME_RATE = 0.25  # share of kills that do not wait for every worker to be RUNNING (they may hit one that is
# starting, joining or restoring)
# A short session timeout, so the group notices a killed member in 2 s rather than 6 s.
SESSION = ("consumer.session.timeout.ms=2000", "consumer.heartbeat.interval.ms=250")
WIPE_RATE = 0.25
# Each record takes 1 ms to process, so a worker spends a good part of its time mid-batch, with records
# processed since its last commit (without it a batch takes ~1 ms and most kills find nothing uncommitted).
SLOW_MS = 1


@dataclass
class Outcome:
    kills: int = 0
    wipes: int = 0
    running_kills: int = 0  # kills while every worker was RUNNING
    records: int = 0
    duplicates: int = 0  # output emissions beyond the first per input record
    excess: int = 0  # final counts above the oracle's, summed over keys
    dead_letters: int = 0
    skips: int = 0  # undecodable records skipped with a warning (log_and_continue), counted in the logs
    committed_at_kills: list[dict[int, int]] = field(default_factory=list)  # per input partition, at each kill
    produced_at_kills: list[dict[int, int]] = field(default_factory=list)  # end offsets of what was sent by then
    replaying_kills: int = 0  # kills after which records the victim had processed were processed again
    abort_explained_duplicates: int = 0  # records emitted twice that an abandoned transaction (no kill) explains
    unexplained_duplicates: int = 0  # records emitted twice that neither explains
    lost_output_counts: int = 0  # counts above the extra emissions: records counted twice, first output lost at a kill
    unexplained: list[tuple[int, int]] = field(default_factory=list)  # (partition, offset) of those duplicates


class Workers:
    """The run's worker processes: start, SIGKILL, restart, stop with SIGTERM."""

    def __init__(self, run: Run, bootstrap: str, app_id: str, source: str, sink: str, tmp_path: Path) -> None:
        self.run, self.bootstrap, self.app_id, self.source, self.sink = run, bootstrap, app_id, source, sink
        self.dir = tmp_path / run.name
        self.processes: list[subprocess.Popen[bytes]] = [self._start(i) for i in range(run.workers)]

    def log(self, index: int) -> Path:
        return self.dir / f"worker-{index}.log"

    def _start(self, index: int) -> subprocess.Popen[bytes]:
        self.dir.mkdir(parents=True, exist_ok=True)
        with self.log(index).open("ab") as log:  # the child keeps its own copy of the handle
            log.write(f"=== test: starting worker {index}\n".encode())
            log.flush()
            return subprocess.Popen(
                [sys.executable, "-m", "streaming.cli.main", "worker", "run", "tests.integration.workloads.counting:topology",
                 "--set", f"bootstrap.servers={self.bootstrap}", "--set", f"application.id={self.app_id}",
                 "--set", f"state.dir={self.dir / f'state-{index}'}", "--set", "commit.interval.ms=200",
                 "--set", f"num.standby.replicas={self.run.standbys}",
                 "--set", "processing.exception.handler=dead_letter",
                 "--set", f"default.deserialization.exception.handler={self.run.undecodable}",
                 *(arg for setting in SESSION for arg in ("--set", setting))],
                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONFAULTHANDLER": "1", "COUNT_INPUT": self.source, "COUNT_OUTPUT": self.sink,
                     "COUNT_SLOW_MS": str(SLOW_MS)})

    def assert_alive(self) -> None:
        for index, process in enumerate(self.processes):
            assert process.poll() is None, \
                f"worker {index} exited by itself ({process.returncode}):\n{self.log(index).read_text()[-4000:]}"

    def running(self, index: int) -> bool:
        """Whether the worker's current life last logged the state RUNNING."""
        life = self.log(index).read_text(errors="replace").rsplit("=== test: starting worker", 1)[-1]
        states = STATE_CHANGE.findall(life)
        return bool(states) and states[-1] == "RUNNING"

    def skipped(self) -> set[tuple[int, int]]:
        """(partition, offset) of every record a worker's log says it skipped, over all its lives."""
        skips = re.compile(rf"error at topic {re.escape(self.source)} partition (\d+) offset (\d+) skipped")
        return {(int(p), int(o)) for i in range(len(self.processes))
                for p, o in skips.findall(self.log(i).read_text(errors="replace"))}

    def aborted(self) -> list[tuple[int, int, int]]:
        """(partition, first, end) of the input offsets whose outputs a transaction held when a worker abandoned it
        (aborted, fenced or lost: the worker's warning names them), over all lives; the outputs of an aborted
        transaction stay visible on the embedded broker, so these records may be output twice."""
        spans = re.compile(rf"{re.escape(self.source)}\[(\d+)\]: \[(\d+), (\d+)\)")
        return [(int(p), int(first), int(end)) for i in range(len(self.processes))
                for line in self.log(i).read_text(errors="replace").splitlines() if "abandoned transaction" in line
                for p, first, end in spans.findall(line)]

    def settled(self) -> bool:
        """Whether every worker is RUNNING (the group formed, every task restored)."""
        return all(self.running(i) for i in range(len(self.processes)))

    def kill(self, index: int) -> None:
        process = self.processes[index]
        process.send_signal(signal.SIGKILL)
        assert process.wait(10) == -signal.SIGKILL

    def restart(self, index: int, wipe: bool) -> None:
        if wipe:
            shutil.rmtree(self.dir / f"state-{index}", ignore_errors=True)
        self.processes[index] = self._start(index)

    def stop(self) -> None:
        """SIGTERM the workers one after the other, as a rolling stop does (members of a group leaving at the
        same instant can leave the embedded broker's group stuck: docs/broker-limits.md); one still running
        after 60 s gets SIGABRT, which makes Python's fault handler write every thread's stack to its log,
        and fails the test."""
        codes = []
        for index, process in enumerate(self.processes):
            process.send_signal(signal.SIGTERM)
            try:
                codes.append(process.wait(60))
            except subprocess.TimeoutExpired:
                process.send_signal(signal.SIGABRT)
                process.wait(10)
                raise AssertionError(f"worker {index} did not stop within 60 s of SIGTERM:\n"
                                     f"{self.log(index).read_text()[-6000:]}") from None
        assert codes == [0] * len(codes), \
            f"exit codes {codes}:\n" + "\n".join(self.log(i).read_text()[-3000:] for i in range(len(codes)))

    def kill_all(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.wait(10)


class Feeder(threading.Thread):
    """Produces the run's input at :data:`RECORDS_PER_S` until stopped: seeded keys, values ``v<i>``, the
    poison value or undecodable bytes. ``ends``: the end offset per partition once done; ``error``: what
    went wrong."""

    def __init__(self, run: Run, bootstrap: str, topic: str) -> None:
        super().__init__(name="feeder", daemon=True)
        self.run_, self.bootstrap, self.topic = run, bootstrap, topic
        self.stopping = threading.Event()
        self.produced = 0
        self.ends: dict[int, int] = {}
        self.error: str | None = None
        self._lock = threading.Lock()

    def acknowledged(self) -> dict[int, int]:
        """The end offset per partition of what the broker acknowledged so far."""
        with self._lock:
            return dict(self.ends)

    def acknowledged_through(self, sent: int, timeout: float = 5.0) -> dict[int, int]:
        """:meth:`acknowledged` once the first ``sent`` records are (delivery reports are served every 0.1 s, so
        at any instant the broker may hold records whose acknowledgement the feeder has not seen yet)."""
        deadline = time.monotonic() + timeout
        while sum(self.acknowledged().values()) < sent and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.acknowledged()

    def record(self, rng: random.Random, i: int) -> tuple[bytes, bytes]:
        key = f"key-{rng.randrange(KEYS):03d}".encode()
        draw = rng.random()
        if draw < self.run_.poison_rate:
            return key, counting.POISON.encode()
        if draw < self.run_.poison_rate + self.run_.undecodable_rate:
            return key, UNDECODABLE
        return key, f"v{i}".encode()

    def run(self) -> None:
        failures: list[str] = []

        def delivered(error: object, message: object) -> None:
            if error is not None:
                failures.append(str(error))
            else:
                partition, offset = message.partition(), message.offset()  # type: ignore[attr-defined]
                with self._lock:
                    self.ends[partition] = max(self.ends.get(partition, 0), offset + 1)

        rng = random.Random(self.run_.seed)
        producer = Producer({"bootstrap.servers": self.bootstrap, "partitioner": "murmur2_random", "linger.ms": 5})
        chunk = RECORDS_PER_S // 10  # one chunk every 0.1 s
        started = time.monotonic()
        chunks = 0
        while not self.stopping.is_set():
            for _ in range(chunk):
                key, value = self.record(rng, self.produced)
                producer.produce(self.topic, value, key, on_delivery=delivered)
                self.produced += 1
            producer.poll(0)
            chunks += 1
            time.sleep(max(0.0, started + chunks * 0.1 - time.monotonic()))
        if producer.flush(60) > 0:
            failures.append("records still unacknowledged after 60 s")
        self.error = failures[0] if failures else None


def inject_faults(run: Run, bootstrap: str, unique_name: str, tmp_path: Path) -> Outcome:
    app_id, source, sink = f"{unique_name}-{run.name}", f"{unique_name}-{run.name}-in", f"{unique_name}-{run.name}-out"
    create_topics(bootstrap, {source: PARTITIONS, sink: PARTITIONS})
    rng = random.Random(run.seed)
    outcome = Outcome()

    def committed_total() -> int:
        return sum(committed_offsets(bootstrap, app_id, source, PARTITIONS).values())

    feeder = Feeder(run, bootstrap, source)
    workers = Workers(run, bootstrap, app_id, source, sink, tmp_path)
    try:
        feeder.start()
        committed = 0
        for _ in range(run.kills):
            anytime, wipe = rng.random() < ANYTIME_RATE, rng.random() < WIPE_RATE
            wait_for(lambda since=committed, anytime=anytime: committed_total() >= since + PROGRESS
                     and (anytime or workers.settled()), 60,
                     f"run {run.name}: the group to settle and commit {PROGRESS} more records after a restart")
            time.sleep(rng.uniform(*KILL_DELAY_S))
            workers.assert_alive()
            victim = rng.randrange(run.workers)
            sent = feeder.produced  # what the victim may have read: everything sent before it died
            workers.kill(victim)
            outcome.committed_at_kills.append(committed_offsets(bootstrap, app_id, source, PARTITIONS))
            outcome.produced_at_kills.append(feeder.acknowledged_through(sent))
            workers.restart(victim, wipe)
            outcome.running_kills += not anytime
            committed = committed_total()
            outcome.kills += 1
            outcome.wipes += wipe
        feeder.stopping.set()
        feeder.join(120)
        assert not feeder.is_alive() and feeder.error is None, f"feeding the input failed: {feeder.error}"
        wait_for(lambda: committed_offsets(bootstrap, app_id, source, PARTITIONS) == feeder.ends, 120,
                 f"run {run.name}: the workers to commit all input {feeder.ends}")
        workers.assert_alive()
        workers.stop()
    finally:
        workers.kill_all()
    try:
        account(run, bootstrap, app_id, source, sink, feeder.produced, workers.skipped(), outcome, workers.aborted())
    except AssertionError:
        kept = ROOT / "test-artifacts" / f"fault-injection-{app_id}"
        shutil.copytree(workers.dir, kept, ignore=shutil.ignore_patterns("state-*"), dirs_exist_ok=True)
        print(f"run {run.name} failed: its workers' logs are kept in {kept}")
        raise
    if run.standbys:
        assert any("created standby task" in workers.log(i).read_text() for i in range(run.workers))
    return outcome


def account(run: Run, bootstrap: str, app_id: str, source: str, sink: str, produced: int,
            skipped: set[tuple[int, int]], outcome: Outcome, aborted: Sequence[tuple[int, int, int]] = ()) -> None:
    """Every input record is in the output, the dead-letter topic or the workers' skip warnings; the final
    counts are the oracle's, plus at most what records processed twice explain. A record output twice is explained
    by a kill that found it produced but not committed, or by a transaction a live worker abandoned while it held
    the record's outputs (``aborted``: (partition, first, end) from the workers' logs)."""
    inputs = {(r.partition, r.offset): r for r in read_topic(bootstrap, source, Serdes.Bytes(), Serdes.Bytes(),
                                                               PARTITIONS)}
    assert len(inputs) == produced
    poison = {po for po, r in inputs.items() if r.value == counting.POISON.encode()}
    undecodable = {po for po, r in inputs.items() if r.value == UNDECODABLE}
    good = set(inputs) - poison - undecodable
    assert poison and undecodable

    output = read_topic(bootstrap, sink, Serdes.String(), Serdes.Json(), PARTITIONS)
    emissions = collections.Counter((r.value["partition"], r.value["offset"]) for r in output)
    assert not set(emissions) - good, f"outputs for records that are not good input: {sorted(set(emissions) - good)[:5]}"
    assert not good - set(emissions), f"good input records never output: {sorted(good - set(emissions))[:5]}"
    assert all(r.key.encode() == inputs[(r.value["partition"], r.value["offset"])].key for r in output)

    dead = read_topic(bootstrap, dead_letter_topic(app_id), Serdes.Bytes(), Serdes.Bytes(), 1)
    stages = collections.defaultdict(set)
    for letter in dead:
        headers = error_headers(letter.headers)
        assert headers["source.topic"] == source, headers
        stages[headers["stage"]].add((int(headers["source.partition"]), int(headers["source.offset"])))
    if run.undecodable == "dead_letter":
        assert dict(stages) == {"processing": poison, "deserialization": undecodable}
        assert not skipped
    else:
        assert dict(stages) == {"processing": poison}
        assert skipped == undecodable, f"skipped {sorted(skipped)[:5]}..., undecodable {sorted(undecodable)[:5]}..."

    oracle = collections.Counter(inputs[po].key.decode() for po in good)
    final = last_value_per_key(read_topic(bootstrap, changelog_topic(app_id, counting.STORE), Serdes.String(),
                                          Serdes.Long(), PARTITIONS))
    last_output = {key: value["count"] for key, value in last_value_per_key(output).items()}
    assert final == last_output, "the changelog's final counts differ from the last outputs"
    assert set(final) == set(oracle)
    extra_emissions = collections.Counter()
    for po, times in emissions.items():
        extra_emissions[inputs[po].key.decode()] += times - 1
    # How many times each record may have been counted again: once per kill that found it sent but not committed
    # (its first output may have been lost with the victim's producer), or as many times as it was emitted again.
    windows = list(zip(outcome.committed_at_kills, outcome.produced_at_kills, strict=True))
    recounts = collections.Counter()
    for po in good:
        partition, offset = po
        in_windows = sum(committed.get(partition, 0) <= offset < produced.get(partition, 0)
                         for committed, produced in windows)
        recounts[inputs[po].key.decode()] += max(emissions[po] - 1, in_windows)
    def history(key: str) -> str:
        """What a failure shows of a key: its emissions and its changelog, in topic order (with the kills)."""
        emitted = [(r.offset, r.value["count"], r.value["partition"], r.value["offset"]) for r in
                   sorted(output, key=lambda r: (r.partition, r.offset)) if r.key == key]
        logged = [(r.offset, r.value) for r in changelog if r.key == key]
        return (f"; emissions (output offset, count, input partition, input offset): {emitted}; changelog (offset, "
                f"count): {logged}; committed/produced at each kill: "
                f"{list(zip(outcome.committed_at_kills, outcome.produced_at_kills, strict=True))}")
    changelog = sorted(read_topic(bootstrap, changelog_topic(app_id, counting.STORE), Serdes.String(), Serdes.Long(),
                                  PARTITIONS), key=lambda r: (r.partition, r.offset))
    for key, expected in oracle.items():
        assert expected <= final[key] <= expected + recounts[key], \
            f"run {run.name}: {key} counted {final[key]}, oracle {expected}, records emitted twice " \
            f"{extra_emissions[key]}, records that may have been counted again {recounts[key]}{history(key)}"
    # Each emission's count is the key's running count at its record, plus at most the key's double counts.
    rank, seen = {}, collections.Counter()
    for po in sorted(good):
        key = inputs[po].key.decode()
        seen[key] += 1
        rank[po] = seen[key]
    for r in output:
        po = (r.value["partition"], r.value["offset"])
        assert rank[po] <= r.value["count"] <= rank[po] + recounts[r.key], \
            f"run {run.name}: {r.key} at input {po} emitted count {r.value['count']}, running count {rank[po]}" \
            f"{history(r.key)}"
    # Which kill made each record be processed again: the first that found it produced but not committed.
    replaying = set()
    for (partition, offset), times in emissions.items():
        if times > 1:
            kill = next((k for k, (committed, produced) in enumerate(zip(outcome.committed_at_kills,
                                                                          outcome.produced_at_kills, strict=True))
                         if committed.get(partition, 0) <= offset < produced.get(partition, 0)), None)
            if kill is not None:
                replaying.add(kill)
            elif any(p == partition and first <= offset < end for p, first, end in aborted):
                outcome.abort_explained_duplicates += times - 1
            else:
                outcome.unexplained_duplicates += times - 1
                outcome.unexplained.append((partition, offset))
    outcome.replaying_kills = len(replaying)
    outcome.records = len(inputs)
    outcome.duplicates = sum(extra_emissions.values())
    outcome.excess = sum(final[key] - oracle[key] for key in oracle)
    outcome.lost_output_counts = sum(max(0, final[key] - oracle[key] - extra_emissions[key]) for key in oracle)
    outcome.dead_letters = len(dead)
    outcome.skips = len(skipped)


def last_value_per_key(records: list[ConsumedRecord]) -> dict:
    """Each key's value in its last record (a key's records share a partition)."""
    return {r.key: r.value for r in sorted(records, key=lambda r: (r.partition, r.offset))}


def test_random_sigkills_lose_no_record_and_counts_match_the_oracle(bootstrap: str, unique_name: str,
                                                                    tmp_path: Path) -> None:
    started = time.monotonic()
    outcomes = [inject_faults(run, bootstrap, unique_name, tmp_path) for run in RUNS]
    wall = time.monotonic() - started
    for run, outcome in zip(RUNS, outcomes, strict=True):
        print(f"fault injection run {run.name}: {outcome.kills} kills ({outcome.running_kills} with every worker RUNNING, "
              f"{outcome.wipes} restarts on wiped state), "
              f"{outcome.replaying_kills} kills made records be processed again, {outcome.records} records, "
              f"{outcome.duplicates} duplicate outputs, {outcome.excess} counted twice, "
              f"{outcome.dead_letters} dead letters, {outcome.skips} skips, {outcome.unexplained_duplicates} duplicates no kill explains, "
              f"{outcome.lost_output_counts} counted twice with their first output lost at a kill")
    kills = sum(o.kills for o in outcomes)
    print(f"fault injection: {len(RUNS)} runs, {kills} kills survived, {sum(o.records for o in outcomes)} records "
          f"checked, {sum(o.duplicates for o in outcomes)} duplicates seen, "
          f"{sum(o.excess for o in outcomes)} counted twice, wall time {wall:.0f} s")
    assert kills >= 20
