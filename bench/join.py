"""Stream-table join: orders (keyed by user) left-joined with a users table, against a loop that keeps a dict
from the table topic.

The loop subscribes to both topics in one group, holds the orders' partitions paused until every users'
partition is at its end, then looks each order up in the dict. Brook: ``stream.left_join(table)`` (with
``max.task.idle.ms=0``, its default, a task waits for a partition with records still on the broker). Both
count the table's records among their input. Users u9000-u9999 are never loaded: ~10% of orders join None.

    .venv/bin/python bench/join.py [--records N]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common as C
from bench import harness as H

USERS = 9_000  # of the 10,000 users orders name


def users() -> Any:
    for i in range(USERS):
        yield f"u{i:04d}", {"region": C.REGIONS[(i * 7) % 4]}, C.BASE_TS_MS - 1


def orders(records: int) -> Any:
    for key, value, ts in H.orders(records):
        yield value["user"], value, ts


def enrich(order: dict[str, Any], user: dict[str, Any] | None) -> dict[str, Any]:
    return {**order, "user_region": None if user is None else user["region"]}


def loop(cfg: dict[str, Any], producer: Any) -> H.Loop:
    import orjson
    from confluent_kafka import KafkaError

    loads, dumps, send, out = orjson.loads, orjson.dumps, H.sender(producer), cfg["out"]
    table_topic, stream_topic = cfg["topics"]
    table: dict[bytes, Any] = {}
    loading: set[int] = set()
    held: list[Any] = []

    def on_assign(consumer: Any, partitions: list[Any]) -> None:
        consumer.assign(partitions)
        loading.update(tp.partition for tp in partitions if tp.topic == table_topic)
        held[:] = [tp for tp in partitions if tp.topic == stream_topic]
        consumer.pause(held)
        state["consumer"] = consumer

    state: dict[str, Any] = {}

    def step(messages: list[Any]) -> int:
        records = 0
        for m in messages:
            if m.error() is not None:
                if m.error().code() == KafkaError._PARTITION_EOF and m.topic() == table_topic:
                    loading.discard(m.partition())
                    if not loading and held:
                        state["consumer"].resume(held)
                        held.clear()
                continue
            records += 1
            if m.topic() == table_topic:
                table[m.key()] = loads(m.value())
            else:
                key = m.key()
                send(out, dumps(enrich(loads(m.value()), table.get(key))), key, m.timestamp()[1])
        return records
    return H.Loop(step, on_assign=on_assign, consumer={"enable.partition.eof": True})


def brook(cfg: dict[str, Any]) -> tuple[Any, dict[str, str]]:
    from streaming import Serdes, StreamsBuilder

    string, json = Serdes.String(), Serdes.Json()
    builder = StreamsBuilder()
    table = builder.table(cfg["topics"][0], key_serde=string, value_serde=json, materialized="users")
    builder.stream(cfg["topics"][1], key_serde=string, value_serde=json).left_join(table, enrich).to(
        cfg["out"], key_serde=string, value_serde=json)
    return builder.build(), {}


def verify(bootstrap: str, records: int) -> Any:
    import orjson

    regions = {key: value["region"] for key, value, _ in users()}

    def check(cfg: dict[str, Any]) -> str | None:
        seen = {}
        for m in C.iter_topic(bootstrap, cfg["out"], H.PARTITIONS):
            v = orjson.loads(m.value())
            seen[v["order_id"]] = v["user_region"] == regions.get(v["user"])
        wrong = sum(1 for n in range(records) if not seen.get(n))
        return f"{wrong:,} orders missing or joined wrong" if wrong or len(seen) != records else None
    return check


def main(argv: list[str] | None = None) -> int:
    with H.Run("join", "stream-table left join against a dict kept from the table topic", argv) as run:
        table, stream = run.topic("users"), run.topic("orders")
        ends = {table: H.load(run.bootstrap, table, users()), stream: H.load(run.bootstrap, stream,
                                                                               orders(run.args.records))}
        check = verify(run.bootstrap, run.args.records)
        for _ in run.rounds():
            for label in ("loop", "brook"):
                run.side(label, label, run.cfg(label, topics=[table, stream], out=run.topic(f"out-{label}"),
                                               ends=ends), USERS + run.args.records, verify=check)
        run.versus("dict loop", "brook", "loop", 0.6)
        return run.finish()


if __name__ == "__main__":
    sys.exit(main())
