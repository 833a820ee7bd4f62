"""End-to-end latency benchmark: p50/p99 from a record's timestamp to its output being readable.

Two apps, each beside a hand-written confluent-kafka loop doing the same work at the same rate:

* stateless -- JSON in -> filter(amount > 10) -> map_values(+big) -> JSON out (bench/stateless.py's).
* stateful  -- JSON in -> group_by_key -> aggregate(count, sum(amount)) -> JSON out, every update
               emitted (``statestore.cache.max.bytes=0``: a record cache holds updates until the next
               commit, which is what a latency-sensitive Kafka Streams app turns off too); RocksDB store
               with a changelog. The loop keeps the aggregate in a dict.

Phases, per app:

1. **Peak.** 200,000 preloaded records through Brook's app; its peak is the records/s from its first
   output record to its last (the group join left out).
2. **Latency.** At ``--fraction`` (default 0.2) of that peak, for each side (loop, then Brook) on fresh
   topics: the side starts and joins its group; then a paced producer (its own process) writes records
   for ``--seconds`` with the record timestamp set to the wall clock at ``produce()``; a reader in this
   process (``fetch.wait.max.ms=5``) takes every output record and its latency is the wall clock at
   receipt minus the record's timestamp (both apps keep the input's timestamp). The first second of
   records is a warm-up and left out. Target: Brook's p99 under 50 ms.

Beside them, the broker's floor: the paced producer and the reader with nothing in between (one hop where an app
makes two). Both sides use bench/common.py's client settings (producer ``linger.ms=5``, so up to 5 ms of each hop
is the producer's batching) and ``fetch.wait.max.ms=5`` on their consumers.

Each side's row also has the p99 of each third of its run and the broker's CPU (cores) in each third: on the
embedded broker a fetch costs more the longer the partition, so latency grows as the run's topics fill.

    .venv/bin/python bench/latency.py
    .venv/bin/python bench/latency.py --apps stateless --seconds 10 --fraction 0.1
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing as mp
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from bench import common as C  # noqa: E402

NAME = "latency"
PARTITIONS = 4
PEAK_RECORDS = 200_000
TARGET_P99_MS = 50.0
WARM_UP_S = 1.0
PRECOMPUTED = 50_000  # distinct input records the paced producer cycles through
APPS = ("stateless", "stateful")
SIDES = ("broker", "loop", "brook")
#: What a latency-sensitive consumer sets (both sides): the broker answers a fetch with no new data after 5 ms, not
#: librdkafka's default 500 ms.
LATENCY_CONSUMER_SETTINGS = {"fetch.wait.max.ms": 5}


def consume_ready(consumer: Any, most: int, timeout: float) -> list[Any]:
    """The records fetched already (up to ``most``); only if there are none, wait up to ``timeout`` for the first.
    ``consume(n, timeout)`` alone waits until it has ``n`` records or the timeout passed, which at a low rate adds the
    whole timeout to every record's latency (measured: 33 ms p50 on one hop, against 7 ms this way)."""
    return consumer.consume(most, 0) or consumer.consume(1, timeout)


# -- the app, both ways (child processes) ---------------------------------------------------------------------
def loop_main(cfg: dict[str, Any], q: Any, stop: Any) -> None:
    """The hand-written loop: consume, transform (or fold into a dict), produce with the input's timestamp."""
    try:
        import orjson
        from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

        loads, dumps = orjson.loads, orjson.dumps
        consumer = Consumer({"bootstrap.servers": cfg["bootstrap"], "group.id": f"loop-{cfg['run']}",
                             **cfg["consumer"]})
        producer = Producer({"bootstrap.servers": cfg["bootstrap"], **cfg["producer"]})
        produce, out, stateful = producer.produce, cfg["out"], cfg["app"] == "stateful"
        totals: dict[bytes, dict[str, Any]] = {}
        consumer.subscribe([cfg["in"]], on_assign=lambda c, ps: q.put(("running", None)))
        last_commit = time.monotonic()
        while not stop.is_set():
            for m in consume_ready(consumer, 1000, 0.05):
                if m.error() is not None:
                    continue
                v = loads(m.value())
                if stateful:
                    total = totals.get(m.key()) or {"count": 0, "sum": 0.0}
                    total = totals[m.key()] = {"count": total["count"] + 1, "sum": total["sum"] + v["amount"]}
                    value = dumps(total)
                elif v["amount"] > 10:
                    value = dumps({**v, "big": v["amount"] > 50})
                else:
                    continue
                while True:
                    try:
                        produce(out, value, m.key(), timestamp=m.timestamp()[1])
                        break
                    except BufferError:
                        producer.poll(0.01)
            producer.poll(0)
            if time.monotonic() - last_commit >= C.COMMIT_INTERVAL_S:
                producer.flush()
                try:
                    consumer.commit(asynchronous=False)
                except KafkaException as exc:
                    if exc.args[0].code() != KafkaError._NO_OFFSET:  # nothing consumed since the last commit
                        raise
                last_commit = time.monotonic()
        producer.flush(30)
        consumer.close()
        q.put(("done", {"cpu_s": C.cpu_seconds(), "peak_rss_mb": C.peak_rss_mb()}))
    except BaseException:  # noqa: BLE001 - report everything to the parent
        q.put(("error", traceback.format_exc()))


def brook_main(cfg: dict[str, Any], q: Any, stop: Any) -> None:
    """The same app through Brook's public API."""
    try:
        from streaming import KafkaStreams, Serdes, StreamsBuilder

        String, Json = Serdes.String(), Serdes.Json()
        builder = StreamsBuilder()
        stream = builder.stream(cfg["in"], key_serde=String, value_serde=Json)
        if cfg["app"] == "stateful":
            stream = stream.group_by_key().aggregate(
                lambda: {"count": 0, "sum": 0.0},
                lambda key, value, total: {"count": total["count"] + 1, "sum": total["sum"] + value["amount"]},
                materialized="totals").to_stream()
        else:
            stream = stream.filter(lambda k, v: v["amount"] > 10).map_values(lambda v: {**v, "big": v["amount"] > 50})
        stream.to(cfg["out"], key_serde=String, value_serde=Json)
        app = KafkaStreams(builder.build(), {
            "application.id": f"brook-{cfg['app']}-{cfg['run']}", "bootstrap.servers": cfg["bootstrap"],
            "state.dir": cfg["state_dir"], "commit.interval.ms": int(C.COMMIT_INTERVAL_S * 1000),
            "statestore.cache.max.bytes": 0,
            **C.brook_client_settings(cfg["consumer"], cfg["producer"])})
        app.set_state_listener(lambda new, old: q.put(("running", None)) if str(new).endswith("RUNNING") else None)
        app.start()
        while not stop.wait(0.25):
            if app.exception is not None:
                q.put(("error", repr(app.exception)))
                break
        C.close_app(app)
        q.put(("done", {"cpu_s": C.cpu_seconds(), "peak_rss_mb": C.peak_rss_mb()}))
    except BaseException:  # noqa: BLE001
        q.put(("error", traceback.format_exc()))


def paced_producer_main(cfg: dict[str, Any], q: Any) -> None:
    """Write ``rate`` records/s for ``seconds``, each stamped with the wall clock at its ``produce()``."""
    try:
        import orjson
        from confluent_kafka import Producer

        records = [(C.key_of(n).encode(), orjson.dumps(C.value_of(n))) for n in range(PRECOMPUTED)]
        producer = Producer({"bootstrap.servers": cfg["bootstrap"], **cfg["producer"]})
        produce, topic, rate = producer.produce, cfg["in"], cfg["rate"]
        sent = 0
        started = time.monotonic()
        end = started + cfg["seconds"]
        while (now := time.monotonic()) < end:
            due = int((now - started) * rate)
            while sent < due:
                key, value = records[sent % PRECOMPUTED]
                produce(topic, value, key, timestamp=int(time.time() * 1000))
                sent += 1
            producer.poll(0)
            time.sleep(0.001)
        producer.flush(60)
        q.put(("done", {"sent": sent, "seconds": time.monotonic() - started}))
    except BaseException:  # noqa: BLE001
        q.put(("error", traceback.format_exc()))


# -- the parent ---------------------------------------------------------------------------------------------------
class Side:
    """One side's process: started, waited for (its group joined), stopped."""

    def __init__(self, target: Any, cfg: dict[str, Any]) -> None:
        ctx = mp.get_context("spawn")
        self.q, self.stop, self.events = ctx.Queue(), ctx.Event(), {}
        self.proc = ctx.Process(target=target, args=(cfg, self.q, self.stop), daemon=True)
        self.proc.start()

    def wait_for(self, kind: str, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        while kind not in self.events:
            C.pump(self.q, self.events, block=0.1)
            if "error" in self.events:
                raise C.SideFailed(self.events["error"])
            if time.monotonic() > deadline or not self.proc.is_alive() and kind not in self.events:
                raise C.SideFailed(f"no {kind!r} from the side within {timeout:.0f} s")
        return self.events[kind]

    def close(self) -> dict[str, Any]:
        self.stop.set()
        try:
            done = self.wait_for("done", 90)
        finally:
            self.proc.join(30)
            if self.proc.is_alive():
                self.proc.kill()
        return done


def expected_outputs(app: str, sent: int) -> int:
    if app == "stateful":
        return sent
    cycle = sum(C.passes_filter(C.value_of(n)) for n in range(PRECOMPUTED))
    return (sent // PRECOMPUTED) * cycle + sum(C.passes_filter(C.value_of(n)) for n in range(sent % PRECOMPUTED))


def measure_peak(bootstrap: str, app: str, run: str, state_dir: str, clients: dict[str, Any]) -> float:
    """Brook's records/s for ``app`` from its first output to its last over PEAK_RECORDS preloaded records."""
    topics = {"in": f"lat-peak-in-{app}-{run}", "out": f"lat-peak-out-{app}-{run}"}
    C.create_topics(bootstrap, {topics["in"]: PARTITIONS, topics["out"]: PARTITIONS})
    loaded = C.load_orders(bootstrap, topics["in"], PEAK_RECORDS, C.PRODUCER_SETTINGS)
    expected = PEAK_RECORDS if app == "stateful" else loaded.passing
    watcher = C.EndOffsetWatcher(bootstrap, topics["out"], PARTITIONS, C.CONSUMER_SETTINGS)
    side = Side(brook_main, {"bootstrap": bootstrap, "run": f"peak-{run}", "app": app, "state_dir": state_dir,
                             **topics, **clients})
    try:
        first = None
        deadline = time.monotonic() + 300
        while (total := watcher.refresh()) < expected:
            C.pump(side.q, side.events)
            if "error" in side.events:
                raise C.SideFailed(side.events["error"])
            if total and first is None:
                first = time.monotonic()
            if time.monotonic() > deadline:
                raise C.SideFailed(f"peak run of {app}: {total} of {expected} outputs after 300 s")
            time.sleep(0.02)
        done = time.monotonic()
    finally:
        watcher.close()
        side.close()
    return PEAK_RECORDS / max(done - (first or done), 1e-3)


def read_latencies(bootstrap: str, topic: str, expected: Any, timeout: float) -> list[tuple[int, float]]:
    """Every output record of ``topic`` until ``expected()`` (None while unknown) arrived, as (record timestamp,
    latency ms: receipt wall clock minus record timestamp); records stamped in the first WARM_UP_S after the first
    one received are left out."""
    import uuid

    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"lat-reader-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 5, "fetch.queue.backoff.ms": 1})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    latencies: list[tuple[int, float]] = []
    seen = 0
    warm_up_until_ms = None
    deadline = time.monotonic() + timeout
    try:
        while (want := expected()) is None or seen < want:
            if time.monotonic() > deadline:
                raise C.SideFailed(f"{seen} of {want} outputs of {topic} within {timeout:.0f} s")
            for m in consume_ready(consumer, 10_000, 0.05):
                if m.error() is not None:
                    continue
                now_ms = time.time() * 1000
                seen += 1
                timestamp = m.timestamp()[1]
                if warm_up_until_ms is None:
                    warm_up_until_ms = timestamp + WARM_UP_S * 1000
                if timestamp >= warm_up_until_ms:
                    latencies.append((timestamp, now_ms - timestamp))
    finally:
        consumer.close()
    return latencies


def percentile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(int(q * len(sorted_values)), len(sorted_values) - 1)]


def p99_by_third(latencies: list[tuple[int, float]]) -> list[float]:
    """p99 of the records stamped in each third of the measured run (first, middle, last): the embedded broker's
    fetch cost grows with a partition's length, so its latency grows as the run's topics fill (see bench/README)."""
    first, last = latencies[0][0], max(t for t, _ in latencies)
    span = max(last - first, 1) / 3
    thirds: list[list[float]] = [[], [], []]
    for timestamp, latency in latencies:
        thirds[min(int((timestamp - first) / span), 2)].append(latency)
    return [percentile(sorted(third), 0.99) if third else float("nan") for third in thirds]


class BrokerCpuSampler:
    """The embedded broker's CPU use, sampled every second in a thread: its share of one core in each third of
    the samples (None for a broker this bench did not start)."""

    def __init__(self, broker: C.BrokerHandle) -> None:
        self._broker, self._stop = broker, threading.Event()
        self._samples: list[float] = []
        self._thread = threading.Thread(target=self._run, daemon=True)
        if broker.cpu_seconds() is not None:
            self._thread.start()

    def _run(self) -> None:
        last, at = self._broker.cpu_seconds(), time.monotonic()
        while not self._stop.wait(1.0):
            now_cpu, now = self._broker.cpu_seconds(), time.monotonic()
            if now_cpu is None or last is None:
                return
            self._samples.append((now_cpu - last) / (now - at))
            last, at = now_cpu, now

    def stop(self) -> list[float] | None:
        """Stop sampling; the mean core share of the first, middle and last third of the samples."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2)
        if len(self._samples) < 3:
            return None
        n = len(self._samples)
        cuts = [0, n // 3, 2 * n // 3, n]
        return [sum(self._samples[a:b]) / (b - a) for a, b in itertools.pairwise(cuts)]


def measure_latency(broker: C.BrokerHandle, app: str, side_name: str, rate: float, seconds: float, run: str,
                    state_dir: str, clients: dict[str, Any]) -> dict[str, Any]:
    """One paced run. Side "broker" is the floor: no app, the reader takes the input topic itself (one hop)."""
    bootstrap = broker.bootstrap_servers
    topics = {"in": f"lat-in-{app}-{side_name}-{run}", "out": f"lat-out-{app}-{side_name}-{run}"}
    C.create_topics(bootstrap, {topics["in"]: PARTITIONS, topics["out"]: PARTITIONS})
    cfg = {"bootstrap": bootstrap, "run": f"{side_name}-{run}", "app": app, "state_dir": state_dir, **topics,
           **clients}
    side = None if side_name == "broker" else Side(loop_main if side_name == "loop" else brook_main, cfg)
    resources: dict[str, Any] = {}
    try:
        if side is not None:
            side.wait_for("running", 120)
            time.sleep(1.0)  # the assignment settles (Brook: tasks created, stores opened)
        ctx = mp.get_context("spawn")
        producer_q = ctx.Queue()
        producer = ctx.Process(target=paced_producer_main, daemon=True, args=(
            {"bootstrap": bootstrap, "in": topics["in"], "rate": rate, "seconds": seconds, **clients}, producer_q))
        producer.start()
        broker_cpu = BrokerCpuSampler(broker)
        events: dict[str, Any] = {}

        def expected() -> int | None:  # known once the producer reports how many it sent
            C.pump(producer_q, events)
            if "error" in events:
                raise C.SideFailed(events["error"])
            if "done" not in events:
                return None
            sent = events["done"]["sent"]
            return sent if side is None else expected_outputs(app, sent)

        timed = read_latencies(bootstrap, topics["in" if side is None else "out"], expected, seconds + 120)
        broker_cpu_by_third = broker_cpu.stop()
        producer.join(30)
        sent = events["done"]["sent"]
    finally:
        if side is not None:
            resources = side.close()
    latencies = sorted(latency for _, latency in timed)
    return {"side": side_name, "rate": round(rate), "sent": sent, "achieved_rate": round(sent / seconds),
            "measured": len(latencies), "p50_ms": percentile(latencies, 0.50), "p99_ms": percentile(latencies, 0.99),
            "p999_ms": percentile(latencies, 0.999), "max_ms": latencies[-1], "p99_ms_by_third": p99_by_third(timed),
            "broker_cores_by_third": broker_cpu_by_third, **resources}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--apps", nargs="+", choices=APPS, default=list(APPS))
    parser.add_argument("--seconds", type=float, default=15.0, help="length of each paced run")
    parser.add_argument("--fraction", type=float, default=0.2, help="the paced rate as a fraction of Brook's peak")
    parser.add_argument("--bootstrap", help="an already running broker (default: start the embedded one)")
    parser.add_argument("--consumer-set", action="append", metavar="KEY=VALUE",
                        help="a consumer setting for both sides (repeatable)")
    parser.add_argument("--producer-set", action="append", metavar="KEY=VALUE",
                        help="a producer setting for both sides and the paced producer (repeatable)")
    args = parser.parse_args(argv)
    clients = {"consumer": {**C.CONSUMER_SETTINGS, **LATENCY_CONSUMER_SETTINGS, **C.parse_overrides(args.consumer_set)},
               "producer": {**C.PRODUCER_SETTINGS, **C.parse_overrides(args.producer_set)}}
    run = C.run_id()
    results: dict[str, Any] = {"machine": C.machine_info(), "fraction": args.fraction, "seconds": args.seconds,
                               "clients": clients, "apps": {}}
    rows = []
    with C.broker(args.bootstrap) as broker, tempfile.TemporaryDirectory(prefix="brook-bench-latency-") as state:
        bootstrap = broker.bootstrap_servers
        for app in args.apps:
            print(f"{app}: measuring Brook's peak over {PEAK_RECORDS:,} records ...", flush=True)
            peak = measure_peak(bootstrap, app, run, state, clients)
            rate = peak * args.fraction
            print(f"{app}: peak {peak:,.0f} records/s; paced runs at {rate:,.0f} records/s for {args.seconds:.0f} s",
                  flush=True)
            sides = {name: measure_latency(broker, app, name, rate, args.seconds, run, state, clients)
                     for name in SIDES}
            results["apps"][app] = {"peak_records_per_s": round(peak), "sides": sides}
            for side in sides.values():
                rows.append([app, side["side"], f"{side['rate']:,}", f"{side['achieved_rate']:,}",
                             f"{side['measured']:,}", C.fmt_float(side["p50_ms"], 1), C.fmt_float(side["p99_ms"], 1),
                             C.fmt_float(side["p999_ms"], 1), C.fmt_float(side["max_ms"], 1),
                             " / ".join(f"{v:.0f}" for v in side["p99_ms_by_third"]),
                             " / ".join(f"{v:.2f}" for v in side["broker_cores_by_third"] or []) or "-",
                             C.fmt_float(side.get("cpu_s"), 1)])
    print(C.fmt_table(["app", "side", "target/s", "achieved/s", "measured", "p50 ms", "p99 ms", "p99.9 ms",
                       "max ms", "p99 ms by third", "broker cores by third", "cpu s"], rows))
    for name, app in results["apps"].items():
        floor, brook = app["sides"]["broker"]["p99_ms"], app["sides"]["brook"]["p99_ms"]
        print(f"{name}: Brook's p99 {brook:.1f} ms (target < {TARGET_P99_MS:.0f} ms); the broker's own one-hop p99 "
              f"at the same rate {floor:.1f} ms, where Brook's records make two hops")
    path = C.write_results(NAME, results)
    print(f"results: {C.rel_path(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
