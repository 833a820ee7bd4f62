"""Stream-table join throughput: orders keyed by user, left-joined with a users table, JSON out.

Workload: 10,000 users (``{"region": ...}``) and N orders (default 300,000; ~110-byte JSON, keyed by the
order's user), both in 4-partition topics, loaded before either side starts; every order is written to
the output topic with the user's region added (None if the user is unknown: a left join).

Two sides, one after the other, each in its own spawned process with the same client settings
(bench/common.py):

* ceiling -- a hand-written confluent-kafka loop, no framework: read the users topic to its end into a
  dict, then consume the orders, look the user up, produce; no group (assign), no state store, no
  changelog: the fastest a Python process does this join.
* brook   -- ``builder.table(users)`` and ``builder.stream(orders).left_join(table, ...)`` through
  KafkaStreams: a RocksDB store with a changelog for the table, event-time ordering of the two topics
  in each task (users carry earlier timestamps than orders, so a task reads a user before its orders;
  by default (``max.task.idle.ms=0``) a task waits for a partition with records still on the broker, so
  for the users partition to be fetched at start-up).

A side's time runs from just before it subscribes/assigns until every order is in the output topic;
"from first output" leaves out Brook's group join (~3 s on the embedded broker) and the ceiling's
loading of the users dict. Afterwards every output record is checked (each order once, right key,
right region). Brook's ratio is reported beside the ceiling's records/s of the same run.

    .venv/bin/python bench/joins.py                      # 300,000 orders, embedded broker
    .venv/bin/python bench/joins.py --records 100000
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import time
import traceback
from pathlib import Path
from typing import Any

_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from bench import common as C

NAME = "joins"
PARTITIONS = 4
USERS = 10_000
WORKLOAD = "orders (keyed by user) left-join users table -> JSON out"
# A task waits this long for a partition with no buffered records before processing the others, so an
# order is not joined before its user's partition was fetched at start-up (Kafka Streams' setting for
# stream-table joins over topics that arrive unevenly); it costs one wait per task once users run out.


def user_key(i: int) -> str:
    return f"u{i:04d}"


def region_of(i: int) -> str:
    return C.REGIONS[(i * 7) % len(C.REGIONS)]


def known_user(user: str) -> bool:
    """Users 9,000..9,999 are never loaded, so ~10% of orders find no user (the left join's None)."""
    return int(user[1:]) < USERS - 1_000


def enrich(order: dict[str, Any], user: dict[str, Any] | None) -> dict[str, Any]:
    return {**order, "user_region": None if user is None else user["region"]}


def load(bootstrap: str, users_topic: str, orders_topic: str, records: int) -> None:
    import orjson
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, **C.PRODUCER_SETTINGS, "queue.buffering.max.messages": 500_000})

    def send(topic: str, key: str, value: bytes, timestamp: int) -> None:
        while True:
            try:
                producer.produce(topic, key=key.encode(), value=value, timestamp=timestamp)
                return
            except BufferError:
                producer.poll(0.05)
    for i in range(USERS):
        if known_user(user_key(i)):
            send(users_topic, user_key(i), orjson.dumps({"region": region_of(i)}), C.BASE_TS_MS - 1)
    for n in range(records):
        order = C.value_of(n)
        send(orders_topic, order["user"], orjson.dumps(order), order["ts"])
        if n % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("loading: records not delivered after 120 s")


# -- the two sides (child processes) ------------------------------------------------------------------------------
def ceiling_main(cfg: dict[str, Any], q: Any) -> None:
    try:
        import orjson
        from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

        loads, dumps = orjson.loads, orjson.dumps
        consumer = Consumer({"bootstrap.servers": cfg["bootstrap"], "group.id": f"ceiling-{cfg['run']}",
                             **C.CONSUMER_SETTINGS, "enable.partition.eof": True})
        producer = Producer({"bootstrap.servers": cfg["bootstrap"], **C.PRODUCER_SETTINGS})
        t0 = time.monotonic()
        q.put(("started", t0))

        def read(topic: str, handle: Any) -> None:
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
            at_end: set[int] = set()
            while len(at_end) < PARTITIONS:
                for message in consumer.consume(10_000, 0.5):
                    error = message.error()
                    if error is not None:
                        if error.code() == KafkaError._PARTITION_EOF:
                            at_end.add(message.partition())
                            continue
                        raise RuntimeError(str(error))
                    handle(message)

        users: dict[bytes, Any] = {}
        read(cfg["users"], lambda m: users.__setitem__(m.key(), loads(m.value())))
        out = cfg["out"]

        def join(message: Any) -> None:
            key = message.key()
            user = users.get(key)
            value = dumps(enrich(loads(message.value()), user))
            while True:
                try:
                    producer.produce(out, key=key, value=value, timestamp=message.timestamp()[1])
                    return
                except BufferError:
                    producer.poll(0.05)
        read(cfg["orders"], join)
        producer.flush(60)
        consumer.close()
        q.put(("done", {"cpu_s": C.cpu_seconds(), "peak_rss_mb": C.peak_rss_mb()}))
    except BaseException:  # noqa: BLE001 - report everything to the parent
        q.put(("error", traceback.format_exc()))


def brook_main(cfg: dict[str, Any], q: Any, stop: Any) -> None:
    try:
        from streaming import KafkaStreams, Serdes, StreamsBuilder

        String, Json = Serdes.String(), Serdes.Json()
        builder = StreamsBuilder()
        users = builder.table(cfg["users"], key_serde=String, value_serde=Json, materialized="users")
        builder.stream(cfg["orders"], key_serde=String, value_serde=Json).left_join(users, enrich).to(
            cfg["out"], key_serde=String, value_serde=Json)
        app = KafkaStreams(builder.build(), {
            "application.id": f"brook-{cfg['run']}", "bootstrap.servers": cfg["bootstrap"],
            "state.dir": cfg["state_dir"],
            **C.brook_client_settings(C.CONSUMER_SETTINGS, C.PRODUCER_SETTINGS), **cfg["brook_set"]})
        t0 = time.monotonic()
        app.start()
        q.put(("started", t0))
        while not stop.wait(0.25):
            if app.exception is not None:
                q.put(("error", repr(app.exception)))
                break
        C.close_app(app)
        q.put(("done", {"cpu_s": C.cpu_seconds(), "peak_rss_mb": C.peak_rss_mb(), "metrics": C.app_metrics(app)}))
    except BaseException:  # noqa: BLE001
        q.put(("error", traceback.format_exc()))


def run_side(side: str, bootstrap: str, cfg: dict[str, Any], records: int, timeout: float) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    q, stop = ctx.Queue(), ctx.Event()
    C.create_topics(bootstrap, {cfg["out"]: PARTITIONS})
    watcher = C.EndOffsetWatcher(bootstrap, cfg["out"], PARTITIONS, C.CONSUMER_SETTINGS)
    target = ceiling_main if side == "ceiling" else brook_main
    args = (cfg, q) if side == "ceiling" else (cfg, q, stop)
    proc = ctx.Process(target=target, args=args, name=f"bench-{side}", daemon=True)
    events: dict[str, Any] = {}
    proc.start()
    try:
        while "started" not in events:
            C.pump(q, events, block=0.1)
            if "error" in events:
                raise C.SideFailed(events["error"])
        t0 = events["started"]
        t_first = t_done = None
        while t_done is None:
            C.pump(q, events)
            if "error" in events:
                raise C.SideFailed(events["error"])
            total = watcher.refresh()
            now = time.monotonic()
            if total and t_first is None:
                t_first = now
            if total >= records:
                t_done = now
            elif now - t0 > timeout:
                raise C.SideFailed(f"{side}: {total} of {records} outputs after {timeout:.0f} s")
            time.sleep(0.05)
        stop.set()
        while "done" not in events and proc.is_alive():
            C.pump(q, events, block=0.2)
        C.pump(q, events, block=1.0 if "done" not in events else 0.0)
    finally:
        stop.set()
        watcher.close()
        proc.join(90)
        if proc.is_alive():
            proc.kill()
    seconds, after_first = t_done - t0, t_done - (t_first or t0)
    return {"side": side, "seconds": seconds, "from_first_output_s": after_first,
            "records_per_s": records / seconds, "records_per_s_from_first_output": records / max(after_first, 1e-9),
            **events.get("done", {})}


def verify(bootstrap: str, topic: str, records: int) -> dict[str, int]:
    import orjson

    seen: set[int] = set()
    wrong = unmatched = 0
    for message in C.iter_topic(bootstrap, topic, PARTITIONS):
        value = orjson.loads(message.value())
        order_id, user = value["order_id"], value["user"]
        seen.add(order_id)
        expected = region_of(int(user[1:])) if known_user(user) else None
        unmatched += expected is None
        wrong += message.key().decode() != user or value["user_region"] != expected
    return {"orders": len(seen), "duplicates_or_missing": records - len(seen), "wrong": wrong,
            "unmatched_left_join": unmatched}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--bootstrap", help="an already running broker (default: start the embedded one)")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--set", action="append", metavar="KEY=VALUE", help="a Brook config setting (repeatable)")
    parser.add_argument("--only", choices=("ceiling", "brook"), help="run one side only")
    args = parser.parse_args(argv)
    run = C.run_id()
    results: dict[str, Any] = {"workload": WORKLOAD, "records": args.records, "users": USERS,
                               "machine": C.machine_info(), "sides": {}}
    with C.broker(args.bootstrap) as broker:
        bootstrap = broker.bootstrap_servers
        users, orders = f"join-users-{run}", f"join-orders-{run}"
        C.create_topics(bootstrap, {users: PARTITIONS, orders: PARTITIONS})
        print(f"loading {USERS:,} users and {args.records:,} orders ...", flush=True)
        load(bootstrap, users, orders, args.records)
        import tempfile
        with tempfile.TemporaryDirectory(prefix="brook-bench-joins-") as state_dir:
            for side in [args.only] if args.only else ["ceiling", "brook"]:
                cfg = {"bootstrap": bootstrap, "run": run, "users": users, "orders": orders,
                       "out": f"join-out-{side}-{run}", "state_dir": state_dir,
                       "brook_set": C.parse_overrides(args.set)}
                print(f"running {side} ...", flush=True)
                result = run_side(side, bootstrap, cfg, args.records, args.timeout)
                result["verification"] = verify(bootstrap, cfg["out"], args.records)
                results["sides"][side] = result
    sides = list(results["sides"].values())
    rows = [[s["side"], f"{s['records_per_s']:,.0f}", f"{s['records_per_s_from_first_output']:,.0f}",
             C.fmt_float(s["seconds"]), C.fmt_float(s.get("cpu_s")), C.fmt_float(s.get("peak_rss_mb"), 0),
             s["verification"]["wrong"], s["verification"]["duplicates_or_missing"]]
            for s in sides]
    print(C.fmt_table(["side", "records/s", "records/s from 1st output", "seconds", "cpu s", "rss MB", "wrong",
                       "missing"], rows))
    if len(sides) == 2:
        ceiling, brook = sides
        results["ratio"] = brook["records_per_s"] / ceiling["records_per_s"]
        print(f"brook / ceiling: {results['ratio']:.2f}")
    path = C.write_results(NAME, results)
    print(f"results: {C.rel_path(path)}")
    bad = any(s["verification"]["wrong"] or s["verification"]["duplicates_or_missing"] for s in sides)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
