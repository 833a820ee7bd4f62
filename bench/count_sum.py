"""Count + sum of amount per key, caching off: every update emitted, the state durable at each commit.

The loop keeps the totals in a dict, emits every update, and at each commit writes the keys changed since the
last one to RocksDB (rocksdict, one WriteBatch per partition) and to its changelog topic once per key. Brook:
``group_by_key().aggregate()`` with ``statestore.cache.max.bytes=0`` (``--cache`` keeps Brook's 10 MiB cache:
fewer updates downstream, no ratio).

    .venv/bin/python bench/count_sum.py [--records N] [--cache]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common as C
from bench import harness as H


def loop(cfg: dict[str, Any], producer: Any) -> H.Loop:
    import orjson
    from rocksdict import Options, Rdict, WriteBatch

    loads, dumps, send, out, changelog = orjson.loads, orjson.dumps, H.sender(producer), cfg["out"], cfg["changelog"]
    totals: dict[bytes, dict[str, Any]] = {}
    dirty: dict[int, dict[bytes, bytes]] = {}
    dbs: dict[int, Any] = {}

    def step(messages: list[Any]) -> None:
        for m in messages:
            key = m.key()
            total = totals.get(key)
            if total is None:
                total = totals[key] = {"count": 0, "sum": 0.0}
            total["count"] += 1
            total["sum"] += loads(m.value())["amount"]
            value = dumps(total)
            dirty.setdefault(m.partition(), {})[key] = value
            send(out, value, key, m.timestamp()[1])

    def flush_state() -> None:
        for partition, changed in dirty.items():
            db = dbs.get(partition)
            if db is None:
                db = dbs[partition] = Rdict(f"{cfg['state_dir']}/{cfg['group']}-{partition}", Options())
            batch = WriteBatch()
            for key, value in changed.items():
                batch.put(key, value)
                send(changelog, value, key)
            db.write(batch)
        dirty.clear()
    return H.Loop(step, flush_state)


def brook(cfg: dict[str, Any]) -> tuple[Any, dict[str, str]]:
    from streaming import Serdes, StreamsBuilder

    def add(key: str, order: dict[str, Any], total: dict[str, Any]) -> dict[str, Any]:
        return {"count": total["count"] + 1, "sum": total["sum"] + order["amount"]}

    builder = StreamsBuilder()
    (builder.stream(cfg["topics"][0], key_serde=Serdes.String(), value_serde=Serdes.Json()).group_by_key()
     .aggregate(lambda: {"count": 0, "sum": 0.0}, add, materialized="totals").to_stream().to(cfg["out"]))
    return builder.build(), {"statestore.cache.max.bytes": str(cfg["cache_bytes"])}


def verify(bootstrap: str, records: int, every_update: bool) -> Any:
    """Every update (or, with the cache, at least the last per key) and the right final totals."""
    import orjson

    expected: dict[str, list[float]] = {}
    for n in range(records):
        total = expected.setdefault(C.key_of(n), [0, 0.0])
        total[0] += 1
        total[1] += C.value_of(n)["amount"]

    def check(cfg: dict[str, Any]) -> str | None:
        count, last = 0, {}
        for m in C.iter_topic(bootstrap, cfg["out"], H.PARTITIONS):
            count += 1
            last[m.key().decode()] = orjson.loads(m.value())
        if every_update and count != records:
            return f"{count:,} updates for {records:,} records"
        wrong = [k for k, (n, s) in expected.items()
                 if k not in last or last[k]["count"] != n or abs(last[k]["sum"] - s) > 1e-6 * max(s, 1)]
        return f"{len(wrong):,} keys with wrong final totals, e.g. {wrong[:3]}" if wrong else None
    return check


def main(argv: list[str] | None = None) -> int:
    def options(parser: Any) -> None:
        parser.add_argument("--cache", action="store_true", help="Brook with its 10 MiB cache (no ratio)")

    with H.Run("count_sum", "count + sum per key, every update emitted, durable at each commit", argv,
               options) as run:
        source = run.topic("in")
        ends = {source: H.load(run.bootstrap, source, H.orders(run.args.records))}
        cache = 10 * 1024 * 1024 if run.args.cache else 0
        sides = (("brook", "brook"),) if run.args.cache else (("loop", "loop"), ("brook", "brook"))
        check = verify(run.bootstrap, run.args.records, not cache)
        for _ in run.rounds():
            for label, kind in sides:
                cfg = run.cfg(label, topics=[source], out=run.topic(f"out-{label}"), ends=ends, cache_bytes=cache,
                              changelog=run.topic(f"changelog-{label}"))
                run.side(label, kind, cfg, run.args.records, verify=check)
        if not cache:
            run.versus("loop", "brook", "loop", 0.6)
        return run.finish()


if __name__ == "__main__":
    sys.exit(main())
