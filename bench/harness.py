"""The benchmark harness (issue 21): broker, input, run a side, watch it, verify its output, report.

A workload module (``bench/stateless.py`` etc.) gives, for each side, a factory the side's process calls:

* ``loop(cfg, producer)`` -- the ceiling, the minimal hand-written loop: returns a :class:`Loop` whose
  ``step(messages)`` handles one ``consume(num_messages=1000)`` batch and ``flush_state()`` runs before
  every commit (the stateful loops write their dirty keys there).
* ``brook(cfg)`` -- Brook: returns ``(topology, extra streams config)``.

:func:`run_side` starts N processes of one side (spawned: imports, RSS and CPU are per side), waits until
their progress counters sum to the input, stops them and collects what each timed in its own process:

* processing rate: ``(records - records of the first batch) / (end of the last batch - end of the first)``
  -- the loop after each batch; Brook per processing round right after the source
  (``KafkaStreams.processing_span()``). The group join, the start and the close are outside it.
* close: seconds from the stop to the side's clients closed (its last commit included).
* CPU us/record: the process's CPU from just before subscribe/start to the stop, over the records.
* peak RSS (VmHWM) per process; the broker's CPU during the side.

``python bench/harness.py`` prints one table of every ratio from ``bench/results/<workload>.json``.
"""

from __future__ import annotations

import importlib
import json
import multiprocessing as mp
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from bench import common as C

PARTITIONS = 4
BATCH = 1000
#: Rounds of every side per workload (``--rounds``): on a shared machine one run's rate moves by 10-20% between runs.
ROUNDS = 3
WORKLOADS = ("stateless", "count_sum", "tumbling", "join", "restore", "workers")


@dataclass
class Loop:
    """One ceiling: ``step`` per consumed batch; ``flush_state`` before each commit; ``on_assign`` optional."""

    step: Callable[[list[Any]], int | None]  # the records among the messages (None: all of them)
    flush_state: Callable[[], None] = lambda: None
    on_assign: Callable[[Any, list[Any]], None] | None = None
    consumer: dict[str, Any] = field(default_factory=dict)


def sender(producer: Any) -> Callable[..., None]:
    """``produce`` that waits out a full queue (what every hand-written loop needs)."""
    produce, poll = producer.produce, producer.poll

    def send(topic: str, value: bytes, key: bytes | None, timestamp: int = 0) -> None:
        while True:
            try:
                produce(topic, value, key, timestamp=timestamp)
                return
            except BufferError:
                poll(0.01)
    return send


def brook_config(cfg: dict[str, Any], extra: dict[str, Any]) -> dict[str, str]:
    return {"application.id": cfg["group"], "bootstrap.servers": cfg["bootstrap"], "state.dir": cfg["state_dir"],
            "commit.interval.ms": str(int(C.COMMIT_INTERVAL_S * 1000)),
            **C.brook_client_settings(C.CONSUMER_SETTINGS, C.PRODUCER_SETTINGS), **extra, **cfg.get("brook_set", {})}


# -- the sides, in their own processes ------------------------------------------------------------------------------
def _loop_side(cfg: dict[str, Any], progress: Any, stop: Any, barrier: Any) -> dict[str, Any]:
    from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

    producer = Producer({"bootstrap.servers": cfg["bootstrap"], **C.PRODUCER_SETTINGS})
    loop: Loop = getattr(importlib.import_module(f"bench.{cfg['workload']}"), cfg.get("loop", "loop"))(cfg, producer)
    consumer = Consumer({"bootstrap.servers": cfg["bootstrap"], "group.id": cfg["group"], **C.CONSUMER_SETTINGS,
                         **loop.consumer})
    consume, poll, step, flush_state = consumer.consume, producer.poll, loop.step, loop.flush_state

    def commit() -> None:
        producer.flush()
        flush_state()
        producer.flush()
        try:
            consumer.commit(asynchronous=False)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError._NO_OFFSET:
                raise

    barrier.wait(120)  # every process subscribes at once: one group join, not one per process
    cpu0 = C.cpu_seconds()
    if loop.on_assign is None:
        consumer.subscribe(cfg["topics"])
    else:
        consumer.subscribe(cfg["topics"], on_assign=loop.on_assign)
    records = first_records = 0
    first = last = None
    timeline: list[tuple[float, int]] = []  # (end of a batch, records so far): per batch
    next_commit, next_progress = time.perf_counter() + C.COMMIT_INTERVAL_S, 0.0
    while not stop.value:
        messages = consume(BATCH, 0.1)
        if messages:
            n = step(messages)
            n = len(messages) if n is None else n
            now = time.perf_counter()
            records += n
            if n:
                last = now
                timeline.append((now, records))
                if first is None:
                    first, first_records = now, n
        poll(0)
        now = time.perf_counter()
        if now >= next_progress:  # every 50 ms, as Brook's side: the positions, not the records (see _positions)
            progress.value = sum(max(tp.offset, 0) for tp in consumer.position(consumer.assignment()))
            next_progress = now + 0.05
        if now >= next_commit:
            commit()
            next_commit = time.perf_counter() + C.COMMIT_INTERVAL_S
    cpu = C.cpu_seconds() - cpu0
    closing = time.perf_counter()
    commit()
    consumer.close()
    return {"records": records, "first_records": first_records, "first": first, "last": last, "cpu_s": cpu,
            "close_s": time.perf_counter() - closing, "timeline": timeline}


def _brook_side(cfg: dict[str, Any], progress: Any, stop: Any, barrier: Any) -> dict[str, Any]:
    from streaming import KafkaStreams

    topology, extra = getattr(importlib.import_module(f"bench.{cfg['workload']}"), cfg.get("brook", "brook"))(cfg)
    app = KafkaStreams(topology, brook_config(cfg, extra))
    barrier.wait(120)
    cpu0 = C.cpu_seconds()
    app.start()
    timeline: list[tuple[float, int]] = []  # (a sample's time, records so far) every 50 ms
    while not stop.value:
        time.sleep(0.05)
        if app.exception is not None:
            raise RuntimeError(f"Brook failed: {app.exception!r}")
        progress.value = _positions(app)
        timeline.append((time.perf_counter(), app.processing_span()[0]))
    records, first_records, first, last = app.processing_span()
    cpu = C.cpu_seconds() - cpu0
    closing = time.perf_counter()
    closed = app.close(timeout=60)
    if app.exception is not None or not closed:  # a failed last commit would leave its records uncommitted
        raise RuntimeError(f"Brook's close failed: {app.exception!r}" if app.exception else "Brook did not close")
    return {"records": records, "first_records": first_records, "first": first, "last": last, "cpu_s": cpu,
            "close_s": time.perf_counter() - closing, "timeline": [*timeline, (last, records)]}


def _positions(app: Any) -> int:
    """The input records behind the next offsets of Brook's tasks (the bench's topics are fresh: offsets from 0).
    The parent stops a side when these reach the input: the processed count would also count a record processed
    twice (at-least-once, after a rebalance) and stop it before its last records. The loop reports its consumer's
    positions for the same reason (two loop processes rebalanced mid-run were stopped short so)."""
    return sum(offset for thread in app._threads for task in list(thread.tasks.tasks.values())
               for offset in list(task.consumed.values()))


def _child(kind: str, cfg: dict[str, Any], progress: Any, stop: Any, barrier: Any, q: Any) -> None:
    try:
        report = (_loop_side if kind == "loop" else _brook_side)(cfg, progress, stop, barrier)
        q.put(("done", {**report, "peak_rss_mb": C.peak_rss_mb()}))
    except BaseException:  # noqa: BLE001 - every failure goes to the parent
        q.put(("error", traceback.format_exc()))


def run_side(kind: str, broker: C.BrokerHandle, cfg: dict[str, Any], expected: int, *, processes: int = 1,
             timeout: float = 900.0) -> dict[str, Any]:
    """Run ``processes`` processes of one side (``kind`` "loop" or "brook") until they have consumed
    ``expected`` records; return the combined figures."""
    ctx = mp.get_context("spawn")
    q, stop = ctx.Queue(), ctx.RawValue("b", 0)
    counters = [ctx.RawValue("q", 0) for _ in range(processes)]
    barrier = ctx.Barrier(processes)
    procs = [ctx.Process(target=_child, args=(kind, cfg, counters[i], stop, barrier, q), daemon=True)
             for i in range(processes)]
    broker_cpu0 = broker.cpu_seconds()
    for proc in procs:
        proc.start()
    reports: list[dict[str, Any]] = []
    try:
        deadline = time.monotonic() + timeout
        while sum(c.value for c in counters) < expected:
            if not q.empty():
                kind_, payload = q.get()
                raise RuntimeError(f"{kind} failed:\n{payload}" if kind_ == "error" else f"{kind} stopped early")
            if time.monotonic() > deadline or not all(p.is_alive() for p in procs):
                raise RuntimeError(f"{kind}: {sum(c.value for c in counters):,}/{expected:,} records after "
                                   f"{timeout:.0f} s or a process died")
            time.sleep(0.05)
        broker_cpu = broker.cpu_seconds()
        stop.value = 1
        while len(reports) < processes:
            what, payload = q.get(timeout=120)
            if what == "error":
                raise RuntimeError(f"{kind} failed:\n{payload}")
            reports.append(payload)
    finally:
        stop.value = 1
        for proc in procs:
            proc.join(30)
            if proc.is_alive():
                proc.kill()
    records = sum(r["records"] for r in reports)
    started = [r for r in reports if r["first"] is not None]
    if len(started) == 1:
        begin, before = started[0]["first"], started[0]["first_records"]
    else:  # from when every process has processed its first batch (the group formed): records after that
        begin = max(r["first"] for r in started)
        before = sum(_records_at(r["timeline"], begin) for r in started)
    span = max(r["last"] for r in started) - begin
    return {
        "processes": processes, "records": records,
        "rate": (records - before) / span if span > 0 else None,
        "timed_share": (records - before) / max(records, 1),  # of the records, those inside the timed span
        "close_s": max(r["close_s"] for r in reports),
        "closes_s": sorted(r["close_s"] for r in reports),  # each process's, fastest first
        "cpu_us_per_record": 1e6 * sum(r["cpu_s"] for r in reports) / max(records, 1),
        "peak_rss_mb": max(r["peak_rss_mb"] for r in reports),
        "broker_cpu_s": None if broker_cpu0 is None else broker_cpu - broker_cpu0,
    }


def _records_at(timeline: list[tuple[float, int]], when: float) -> float:
    """Records a process had processed at ``when``, interpolated between its timeline's points."""
    before = (when, 0)
    for at, count in timeline:
        if at >= when:
            return before[1] + (count - before[1]) * (when - before[0]) / max(at - before[0], 1e-9)
        before = (at, count)
    return before[1]


# -- a run of one workload ------------------------------------------------------------------------------------------
class Run:
    """One workload's run: the broker, its topics, the sides it ran, the ratios; ``finish()`` prints and saves."""

    def __init__(self, name: str, description: str, argv: list[str] | None = None,
                 add_args: Callable[[Any], None] | None = None, rounds: int = ROUNDS) -> None:
        import argparse

        parser = argparse.ArgumentParser(description=description)
        parser.add_argument("--records", type=int, default=1_000_000, help="input records (default 1,000,000)")
        parser.add_argument("--rounds", type=int, default=rounds,
                            help=f"rounds of every side, alternating; each side's fastest counts (default {rounds})")
        parser.add_argument("--bootstrap", help="a running broker instead of the embedded one")
        parser.add_argument("--brook-set", action="append", metavar="KEY=VALUE", default=[],
                            help="extra Brook config, e.g. processing.guarantee=exactly_once_v2 (repeatable)")
        if add_args is not None:
            add_args(parser)
        self.args = parser.parse_args(argv)
        self.name, self.description, self.rid = name, description, C.run_id()
        self.sides: dict[str, dict[str, Any]] = {}  # per side, its fastest round (with every round's rate)
        self.ratios: list[dict[str, Any]] = []
        self.problems: list[str] = []
        self.round = 0

    def __enter__(self) -> Self:
        import contextlib
        import tempfile

        self._stack = contextlib.ExitStack().__enter__()
        self.broker = self._stack.enter_context(C.broker(self.args.bootstrap))
        self.bootstrap = self.broker.bootstrap_servers
        self.state_dir = self._stack.enter_context(tempfile.TemporaryDirectory(prefix=f"bench-{self.name}-"))
        print(f"bench {self.name}: {self.description} ({self.args.records:,} records, broker {self.bootstrap})",
              flush=True)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.__exit__(*exc)

    def rounds(self) -> Iterator[int]:
        """The rounds (``--rounds``): the workload runs every side once per round, so the sides alternate and a slow
        spell of a shared machine falls on both; topics and groups made in a round after the first are its own."""
        for number in range(self.args.rounds):
            self.round = number
            if self.args.rounds > 1:
                print(f"  round {self.round + 1} of {self.args.rounds}", flush=True)
            yield self.round

    def _named(self, name: str) -> str:
        return f"{name}-r{self.round + 1}" if self.round else name

    def topic(self, what: str, partitions: int = PARTITIONS) -> str:
        name = self._named(f"bench-{self.name}-{what}-{self.rid}")
        C.create_topics(self.bootstrap, {name: partitions})
        return name

    def cfg(self, side: str, **extra: Any) -> dict[str, Any]:
        return {"workload": self.name, "bootstrap": self.bootstrap,
                "group": self._named(f"bench-{self.name}-{side}-{self.rid}"), "state_dir": self.state_dir,
                "records": self.args.records, "brook_set": C.parse_overrides(self.args.brook_set), **extra}

    def side(self, label: str, kind: str, cfg: dict[str, Any], expected: int, *,
             verify: Callable[[dict[str, Any]], str | None] | None = None, processes: int = 1) -> dict[str, Any]:
        """Run a side, verify its output (``verify(cfg)`` returns a problem or None) and its commits."""
        print(f"  {label} ...", flush=True)
        try:
            result = run_side(kind, self.broker, cfg, expected, processes=processes)
        except Exception as exc:  # noqa: BLE001 - one failed side does not stop the others
            self.problems.append(f"{label}: {str(exc).strip().splitlines()[-1]}")
            self.sides[label] = {"failed": str(exc)}
            print(f"  {label}: FAILED {exc}", flush=True)
            return self.sides[label]
        problem = verify(cfg) if verify is not None else None
        uncommitted = self._uncommitted(cfg)
        result["verified"] = problem is None and not uncommitted
        for what in (problem, uncommitted):
            if what:
                self.problems.append(f"{label}: {what}")
        print(f"  {label}: {fmt_side(result)}", flush=True)
        self._keep(label, result)
        return result

    def _keep(self, label: str, result: dict[str, Any]) -> None:
        """A side's figures are its fastest round's (a failed round counts as failed), with every round's rate, close
        and peak RSS beside them (the highest RSS and the longest close of any round are shown too)."""
        kept = self.sides.get(label)
        rounds = [*(kept or {}).get("rounds", []), {k: result.get(k) for k in ("rate", "close_s", "peak_rss_mb")}]
        if kept is None or "failed" not in kept and (result.get("rate") or 0) > (kept.get("rate") or 0):
            kept = dict(result)
        kept["rounds"] = rounds
        kept["max_close_s"] = max(r["close_s"] or 0 for r in rounds)
        kept["max_peak_rss_mb"] = max(r["peak_rss_mb"] or 0 for r in rounds)
        self.sides[label] = kept

    def _print_fastest(self) -> None:
        """After the rounds: each side's fastest round, as the ratios take it."""
        if self.args.rounds > 1:
            for label, side in self.sides.items():
                if "failed" not in side:
                    rates = ", ".join(f"{r['rate']:,.0f}" if r["rate"] else "n/a" for r in side["rounds"])
                    print(f"  {label}, fastest of {len(side['rounds'])} rounds ({rates} records/s): {fmt_side(side)}; "
                          f"longest close {side['max_close_s']:.2f} s, highest peak RSS {side['max_peak_rss_mb']:.0f} MB",
                          flush=True)

    def _uncommitted(self, cfg: dict[str, Any]) -> str | None:
        from confluent_kafka import Consumer, TopicPartition

        ends = cfg.get("ends", {})
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": cfg["group"]})
        try:
            committed = consumer.committed([TopicPartition(t, p) for t in ends for p in ends[t]], timeout=30)
        finally:
            consumer.close()
        short = [f"{tp.topic}[{tp.partition}] {tp.offset}/{ends[tp.topic][tp.partition]}" for tp in committed
                 if tp.offset != ends[tp.topic][tp.partition]]
        return f"committed offsets short of the input: {', '.join(short)}" if short else None

    def ratio(self, label: str, num: float | None, den: float | None, target: float | None) -> None:
        value = num / den if num and den else None
        self.ratios.append({"workload": self.name, "ratio": label, "value": value, "target": target})

    def versus(self, what: str, brook: str, loop: str, target: float | None) -> None:
        """``brook``'s processing rate over ``loop``'s (against ``target``) and, less sensitive to a loaded
        machine, the loop's CPU per record over Brook's."""
        b, c = self.sides[brook], self.sides[loop]
        self.ratio(f"{brook} / {what}, processing rate", b.get("rate"), c.get("rate"), target)
        self.ratio(f"{brook} / {what}, CPU per record (inverse)", c.get("cpu_us_per_record"),
                   b.get("cpu_us_per_record"), None)

    def finish(self, extra: dict[str, Any] | None = None) -> int:
        self._print_fastest()
        for r in self.ratios:
            value = "n/a" if r["value"] is None else f"{r['value']:.2f}"
            print(f"  {r['ratio']}: {value}" + ("" if r["target"] is None else f" (target >= {r['target']:g})"))
        for problem in self.problems:
            print(f"  PROBLEM {problem}")
        C.write_results(self.name, {"workload": self.name, "description": self.description,
                                    "records": self.args.records, "sides": self.sides, "ratios": self.ratios,
                                    "problems": self.problems, "machine": C.machine_info(),
                                    "brook_set": C.parse_overrides(self.args.brook_set),
                                    "load_average": list(_loadavg()), "finished": time.strftime("%H:%M:%S"),
                                    **(extra or {})})
        return 1 if self.problems else 0


def fmt_side(r: dict[str, Any]) -> str:
    rate = f"{r['rate']:,.0f} records/s" if r.get("rate") else "rate n/a"
    broker = f", broker CPU {r['broker_cpu_s']:.1f} s" if r.get("broker_cpu_s") is not None else ""
    if r.get("timed_share") is not None and r["timed_share"] < 0.9:
        rate += f" (over the last {100 * r['timed_share']:.0f}% of the records)"
    closes = r.get("closes_s") or []
    close = f"closes {' / '.join(f'{c:.2f}' for c in closes)} s" if len(closes) > 1 else f"close {r['close_s']:.2f} s"
    return (f"{rate}, {close}, {r['cpu_us_per_record']:.1f} CPU us/record, peak RSS "
            f"{r['peak_rss_mb']:.0f} MB{broker}, output {'verified' if r['verified'] else 'NOT verified'}")


def _loadavg() -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return ()


# -- input ----------------------------------------------------------------------------------------------------------
def load(bootstrap: str, topic: str, records: Any, *, partition: bool = False) -> dict[int, int]:
    """Produce ``(key, value dict, timestamp)`` records as JSON; return the end offset per partition (from the
    delivery reports: ListOffsets is wrong on the embedded broker). ``partition``: murmur2 of the key, set here."""
    import orjson
    from confluent_kafka import Producer

    from streaming.runtime.partitioning import partition_for_key

    ends: dict[int, int] = {}

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            raise RuntimeError(f"loading {topic}: {err}")
        ends[msg.partition()] = max(ends.get(msg.partition(), 0), msg.offset() + 1)

    producer = Producer({"bootstrap.servers": bootstrap, **C.PRODUCER_SETTINGS, "on_delivery": delivered,
                         "queue.buffering.max.messages": 500_000})
    for n, (key, value, ts) in enumerate(records):
        k = key.encode()
        extra = {"partition": partition_for_key(k, PARTITIONS)} if partition else {}
        C.produce_waiting(producer, n, topic, value=orjson.dumps(value), key=k, timestamp=ts, **extra)
    if producer.flush(120):
        raise RuntimeError(f"loading {topic}: records not delivered after 120 s")
    return ends


def orders(records: int) -> Any:
    """The orders every workload reads: ``(key, value, timestamp)``, 10,000 keys, ~85% with amount > 10."""
    for n in range(records):
        value = C.value_of(n)
        yield C.key_of(n), value, value["ts"]


# -- the table of every ratio ---------------------------------------------------------------------------------------
def table(names: tuple[str, ...] = WORKLOADS) -> int:
    rows = []
    for name in names:
        path = C.RESULTS_DIR / f"{name}.json"
        if not path.exists():
            rows.append([name, "(not run)", "-", "-", "-", "-", "-", "-"])
            continue
        data = json.loads(path.read_text())
        for r in data["ratios"]:
            value = r["value"]
            target = r["target"]
            verdict = "-" if value is None or target is None else ("meets" if value >= target else "BELOW")
            rows.append([name, r["ratio"], "n/a" if value is None else f"{value:.2f}",
                         "-" if target is None else f">= {target:g}", verdict, f"{data['records']:,}",
                         " ".join(f"{x:.1f}" for x in data.get("load_average", [])), data.get("finished", "-")])
        if data["problems"]:
            rows.append([name, f"PROBLEMS: {'; '.join(data['problems'])[:100]}", "-", "-", "-", "-", "-", "-"])
    print(C.fmt_table(["workload", "ratio", "value", "target", "", "records", "load average", "finished"], rows,
                      "llrrlrll"))
    return 0


if __name__ == "__main__":
    sys.exit(table())
