"""Stateful throughput and restore benchmark: count and sum of amount per key, RocksDB + changelog.

Workload: the same 1,000,000 order records on 10,000 keys as bench/stateless.py (common.load_orders),
in a 4-partition topic. Per key: {"count": n, "sum": total amount}; every update goes downstream
as JSON to an output topic; the aggregate lives in RocksDB with a changelog topic.

Phases, one after the other against the same input (each side in its own spawned process):

* ceiling         -- a hand-written loop, no framework: confluent-kafka consumer + producer, a dict
                     cache in front of one RocksDB (rocksdict.Rdict, raw mode) per input partition;
                     one output record per input record; at each commit (every 5 s): per partition
                     a rocksdict.WriteBatch of the dirty keys + one changelog record per dirty key
                     (4-partition changelog topic, partition = input partition), producer.flush(),
                     synchronous offset commit.
* ceiling restore -- a fresh Rdict per partition filled from the ceiling's changelog, read to
                     partition EOF with a plain (group-less) consumer, one WriteBatch per partition
                     per consume() batch.
* brook           -- StreamsBuilder: stream -> group_by_key -> aggregate(materialized="totals")
                     -> to_stream -> to(out), KafkaStreams with commit.interval.ms=5000 and a
                     10 MiB record cache (so Brook emits one record per key per commit, as Kafka
                     Streams does; its output is <= the input count).
* brook restore   -- a new KafkaStreams instance, same application.id, fresh empty state.dir, with
                     a restore listener: changelog records / (last on_restore_end - first
                     on_restore_start).
* ceiling restore of Brook's changelog -- the same restore loop over the changelog Brook restored.

Completion: ceiling -- every input record consumed, all 1,000,000 output records in the output topic;
Brook -- the group's committed offsets reach the input end offsets. Afterwards both outputs and both
changelogs are read back and the last value per key must equal the oracle (count and sum per key
computed here from the generated data; sums compared with a relative tolerance of 1e-6).
Targets: Brook >= 40% of the ceiling's records/s; Brook restore >= 200,000 changelog records/s.

    .venv/bin/python bench/stateful.py                 # 1,000,000 records, embedded broker
    .venv/bin/python bench/stateful.py --records 100000
    .venv/bin/python bench/stateful.py --only ceiling
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from bench import common as C  # noqa: E402
from streaming.naming import changelog_topic  # noqa: E402

NAME = "stateful"
PARTITIONS = 4
STORE = "totals"
TARGET_RATIO = 0.40
TARGET_RESTORE_RPS = 200_000
CACHE_MAX_BYTES = 10 * 1024 * 1024
WATCH_INTERVAL_S = 0.1
REL_TOL = 1e-6
WORKLOAD = (
    "JSON in -> group_by_key -> aggregate(count, sum(amount)) [RocksDB store, changelog] -> JSON out"
)


# --------------------------------------------------------------------------------------------------
# Oracle and checks
# --------------------------------------------------------------------------------------------------


def oracle_totals(records: int) -> dict[str, tuple[int, float]]:
    """Count and sum of amount per key over orders 0..records-1, summed in input order (which is
    each key's order in its partition, so the float sums come out identical to a correct run)."""
    tot: dict[str, list] = {}
    for n in range(records):
        k = C.key_of(n)
        a = C.value_of(n)["amount"]
        t = tot.get(k)
        if t is None:
            tot[k] = [1, 0.0 + a]
        else:
            t[0] += 1
            t[1] += a
    return {k: (c, s) for k, (c, s) in tot.items()}


def _agg_problem(key: str, got: Any, want: tuple[int, float]) -> str | None:
    """None if ``got`` (a decoded {"count", "sum"}) equals the oracle ``want``, else a description."""
    try:
        count, total = got["count"], got["sum"]
    except Exception:  # noqa: BLE001
        return f"{key}: not an aggregate: {got!r}"
    if count != want[0] or not math.isclose(total, want[1], rel_tol=REL_TOL, abs_tol=1e-9):
        return f"{key}: got count={count} sum={total!r}, want count={want[0]} sum={want[1]!r}"
    return None


def check_totals_topic(
    bootstrap: str, topic: str, oracle: dict[str, tuple[int, float]], *, one_per_input: bool,
    timeout: float = 300.0,
) -> dict[str, Any]:
    """Read ``topic`` (an output or a changelog: key = str key, value = JSON aggregate) to EOF;
    the last value per key must equal the oracle. With ``one_per_input`` (the ceiling's output) each
    key must also have exactly as many records as it has input records."""
    import orjson

    t0 = time.monotonic()
    last: dict[bytes, bytes] = {}
    per_key: dict[bytes, int] = {}
    where: dict[bytes, int] = {}
    records = 0
    split_keys = 0
    ends: dict[int, int] = {}
    for m in C.iter_topic(bootstrap, topic, PARTITIONS, timeout=timeout):
        records += 1
        k = m.key()
        p = m.partition()
        ends[p] = m.offset() + 1
        last[k] = m.value()
        per_key[k] = per_key.get(k, 0) + 1
        if where.setdefault(k, p) != p:
            split_keys += 1
    problems: list[str] = []
    wrong = missing = tombstones = count_mismatch = 0
    keys = {k.decode() if k is not None else None: k for k in last}
    for key, want in oracle.items():
        raw_key = keys.get(key)
        if raw_key is None:
            missing += 1
            if len(problems) < 5:
                problems.append(f"{key}: missing")
            continue
        raw = last[raw_key]
        if raw is None:
            tombstones += 1
            continue
        problem = _agg_problem(key, orjson.loads(raw), want)
        if problem:
            wrong += 1
            if len(problems) < 5:
                problems.append(problem)
        if one_per_input and per_key[raw_key] != want[0]:
            count_mismatch += 1
            if len(problems) < 5:
                problems.append(f"{key}: {per_key[raw_key]} output records for {want[0]} input records")
    extra = len([k for k in keys if k not in oracle])
    ok = not (wrong or missing or tombstones or extra or split_keys or count_mismatch)
    if one_per_input:
        ok = ok and records == sum(c for c, _ in oracle.values())
    return {
        "ok": ok,
        "records": records,
        "keys": len(last),
        "wrong": wrong,
        "missing": missing,
        "extra_keys": extra,
        "tombstones": tombstones,
        "keys_in_several_partitions": split_keys,
        "per_key_count_mismatch": count_mismatch if one_per_input else None,
        "end_offsets": dict(sorted(ends.items())),
        "first_problems": problems,
        "seconds": round(time.monotonic() - t0, 2),
    }


def _check_summary(chk: dict[str, Any] | None) -> str:
    if not chk:
        return "not checked"
    if chk.get("ok"):
        return "ok"
    parts = []
    for name in ("wrong", "missing", "extra_keys", "tombstones", "keys_in_several_partitions",
                 "per_key_count_mismatch"):
        if chk.get(name):
            parts.append(f"{chk[name]} {name.replace('_', ' ')}")
    return "MISMATCH" + (f" ({', '.join(parts)})" if parts else f" ({chk.get('records', 0):,} records)")


# --------------------------------------------------------------------------------------------------
# Child processes
# --------------------------------------------------------------------------------------------------


def _dir_bytes(path: str | Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


def ceiling_main(cfg: dict[str, Any], q: "mp.Queue") -> None:
    """The hand-written loop: dict cache over one Rdict per partition, changelog at commit."""
    try:
        import orjson
        from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
        from rocksdict import Options, Rdict, WriteBatch, WriteOptions

        loads, dumps = orjson.loads, orjson.dumps
        perf = time.perf_counter
        in_topic, out_topic, changelog = cfg["in_topic"], cfg["out_topic"], cfg["changelog"]
        batch = cfg["batch"]
        state_dir = Path(cfg["state_dir"])
        state_dir.mkdir(parents=True, exist_ok=True)
        consumer = Consumer(
            {"bootstrap.servers": cfg["bootstrap"], "group.id": cfg["group_id"], **cfg["consumer"],
             "enable.partition.eof": True}
        )
        producer = Producer({"bootstrap.servers": cfg["bootstrap"], **cfg["producer"]})
        produce, poll = producer.produce, producer.poll
        db_opts = Options(raw_mode=True)
        db_opts.create_if_missing(True)
        write_opts = WriteOptions()
        write_opts.disable_wal = cfg["disable_wal"]  # Kafka Streams writes RocksDB without the WAL

        dbs: dict[int, Any] = {}
        caches: dict[int, dict[bytes, list]] = {}
        dirties: dict[int, set[bytes]] = {}
        marks: dict[str, float] = {}
        stats = {"commits": 0, "changelog_records": 0, "commit_loop_s": 0.0, "db_write_s": 0.0,
                 "flush_s": 0.0, "offset_commit_s": 0.0, "db_misses": 0, "max_commit_s": 0.0}
        closing = [False]

        def open_partition(p: int) -> None:
            if p not in dbs:
                dbs[p] = Rdict(str(state_dir / f"0_{p}"), options=db_opts)
                caches[p] = {}
                dirties[p] = set()

        def flush_state() -> None:
            """Dirty keys -> one WriteBatch per partition + one changelog record per key."""
            for p, dirty in dirties.items():
                if not dirty:
                    continue
                cache = caches[p]
                t = perf()
                wb = WriteBatch(raw_mode=True)
                for k in dirty:
                    a = cache[k]
                    val = dumps({"count": a[0], "sum": a[1]})
                    wb.put(k, val)
                    while True:
                        try:
                            produce(changelog, val, k, partition=p)
                            break
                        except BufferError:
                            poll(0.01)
                t2 = perf()
                dbs[p].write(wb, write_opts)
                t3 = perf()
                stats["commit_loop_s"] += t2 - t
                stats["db_write_s"] += t3 - t2
                stats["changelog_records"] += len(dirty)
                dirty.clear()

        def commit() -> None:
            t = perf()
            flush_state()
            t1 = perf()
            producer.flush()
            t2 = perf()
            try:
                consumer.commit(asynchronous=False)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError._NO_OFFSET:
                    raise
            t3 = perf()
            stats["flush_s"] += t2 - t1
            stats["offset_commit_s"] += t3 - t2
            stats["commits"] += 1
            stats["max_commit_s"] = max(stats["max_commit_s"], t3 - t)

        def on_assign(c, partitions):
            marks.setdefault("assigned", time.monotonic())
            for tp in partitions:
                open_partition(tp.partition)

        def on_revoke(c, partitions):
            if not closing[0]:
                commit()
            for tp in partitions:
                db = dbs.pop(tp.partition, None)
                caches.pop(tp.partition, None)
                dirties.pop(tp.partition, None)
                if db is not None:
                    db.close()

        q.put(("ready", None))
        t0 = time.monotonic()
        q.put(("started", t0))
        consumer.subscribe([in_topic], on_assign=on_assign, on_revoke=on_revoke)
        deadline = t0 + cfg["timeout"]
        eof: set[int] = set()
        consumed = produced = consumed_before = 0
        t_last_batch = None
        last_commit = t0
        interval = cfg["commit_interval_s"]
        while len(eof) < cfg["partitions"]:
            msgs = consumer.consume(num_messages=batch, timeout=0.1)
            now = time.monotonic()
            if now > deadline:
                raise TimeoutError(f"ceiling: input not consumed after {cfg['timeout']:.0f}s ({consumed:,})")
            for m in msgs:
                if m.error() is not None:
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        eof.add(m.partition())
                        continue
                    raise KafkaException(m.error())
                p = m.partition()
                eof.discard(p)
                consumed += 1
                key = m.key()
                cache = caches[p]
                a = cache.get(key)
                if a is None:
                    raw = dbs[p].get(key)
                    stats["db_misses"] += 1
                    if raw is None:
                        a = [0, 0.0]
                    else:
                        d = loads(raw)
                        a = [d["count"], d["sum"]]
                    cache[key] = a
                a[0] += 1
                a[1] += loads(m.value())["amount"]
                dirties[p].add(key)
                out = dumps({"count": a[0], "sum": a[1]})
                while True:
                    try:
                        produce(out_topic, out, key, timestamp=m.timestamp()[1])
                        break
                    except BufferError:
                        poll(0.01)
                produced += 1
            if consumed and "first" not in marks:
                marks["first"] = now
            if consumed != consumed_before:
                t_last_batch = time.monotonic()  # after the last batch that held records
                consumed_before = consumed
            poll(0)
            if now - last_commit >= interval:
                commit()
                last_commit = time.monotonic()
        marks["consumed"] = time.monotonic()  # all partitions at EOF
        marks["last_record"] = t_last_batch
        commit()
        marks["committed"] = time.monotonic()
        keys = sum(len(c) for c in caches.values())
        closing[0] = True
        consumer.close()
        for db in list(dbs.values()):
            db.close()
        q.put(
            (
                "done",
                {
                    "t0": t0,
                    "marks": {k: v - t0 for k, v in marks.items()},
                    "consumed": consumed,
                    "produced": produced,
                    "keys": keys,
                    "stats": {k: round(v, 4) if isinstance(v, float) else v for k, v in stats.items()},
                    "state_dir_bytes": _dir_bytes(state_dir),
                    "peak_rss_mb": C.peak_rss_mb(),
                    "cpu_s": C.cpu_seconds(),
                },
            )
        )
    except BaseException:  # noqa: BLE001 - report everything to the parent
        q.put(("error", traceback.format_exc()))


def restore_main(cfg: dict[str, Any], q: "mp.Queue") -> None:
    """Ceiling-style restore: read a changelog to EOF into a fresh Rdict per partition."""
    try:
        import orjson
        from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition
        from rocksdict import Options, Rdict, WriteBatch, WriteOptions

        state_dir = Path(cfg["state_dir"])
        state_dir.mkdir(parents=True, exist_ok=True)
        opts = Options(raw_mode=True)
        opts.create_if_missing(True)
        write_opts = WriteOptions()
        write_opts.disable_wal = cfg["disable_wal"]
        n_parts = cfg["partitions"]
        dbs = {p: Rdict(str(state_dir / f"0_{p}"), options=opts) for p in range(n_parts)}  # opened untimed
        consumer_conf = {k: v for k, v in cfg["consumer"].items()
                         if k not in ("session.timeout.ms", "heartbeat.interval.ms")}
        consumer = Consumer(
            {"bootstrap.servers": cfg["bootstrap"], "group.id": f"bench-restore-{os.getpid()}",
             **consumer_conf, "enable.auto.commit": False, "enable.auto.offset.store": False,
             "enable.partition.eof": True}
        )
        # A restore consumer is long-lived (Kafka Streams' is connected by the time a restore starts),
        # so connect and fetch metadata untimed.
        consumer.list_topics(cfg["topic"], timeout=10)
        tps = {p: TopicPartition(cfg["topic"], p) for p in range(n_parts)}
        q.put(("ready", None))
        t0 = time.monotonic()
        q.put(("started", t0))
        consumer.assign([TopicPartition(cfg["topic"], p, OFFSET_BEGINNING) for p in range(n_parts)])
        # Done with a partition at partition EOF, or -- without waiting for the empty fetch that
        # EOF needs (the broker holds it fetch.wait.max.ms, 500 ms by default) -- once the position
        # reaches the high watermark of the last Fetch response (cached=True: no ListOffsets, whose
        # answer is wrong on the embedded broker).
        done: set[int] = set()
        position: dict[int, int] = {}
        records = writes = 0
        t_first = None
        deadline = t0 + cfg["timeout"]
        batch = cfg["batch"]
        while len(done) < n_parts:
            if time.monotonic() > deadline:
                raise TimeoutError(f"restore: not at the end after {cfg['timeout']:.0f}s ({records:,} records)")
            # consume() waits for a full batch until its timeout: keep it short so the tail of the
            # changelog (a few records in the last fetch) is not held back.
            msgs = consumer.consume(num_messages=batch, timeout=0.01)
            batches: dict[int, Any] = {}
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        done.add(m.partition())
                        continue
                    raise KafkaException(err)
                p = m.partition()
                wb = batches.get(p)
                if wb is None:
                    wb = batches[p] = WriteBatch(raw_mode=True)
                v = m.value()
                if v is None:
                    wb.delete(m.key())
                else:
                    wb.put(m.key(), v)
                position[p] = m.offset() + 1
                records += 1
            if batches and t_first is None:
                t_first = time.monotonic()
            for p, wb in batches.items():
                dbs[p].write(wb, write_opts)
                writes += 1
            for p, pos in position.items():
                if p not in done and pos >= consumer.get_watermark_offsets(tps[p], cached=True)[1] > 0:
                    done.add(p)
        t_end = time.monotonic()
        consumer.close()
        # Untimed: what the fresh stores now hold.
        state: dict[str, Any] = {}
        for db in dbs.values():
            for k, v in db.items():
                state[k.decode()] = orjson.loads(v)
        problems = []
        wrong = 0
        for key, want in cfg["oracle"].items():
            prob = _agg_problem(key, state[key], want) if key in state else f"{key}: missing"
            if prob:
                wrong += 1
                if len(problems) < 5:
                    problems.append(prob)
        extra = len([k for k in state if k not in cfg["oracle"]])
        for db in dbs.values():
            db.close()
        q.put(
            (
                "done",
                {
                    "t0": t0,
                    "records": records,
                    "seconds": t_end - t0,
                    "seconds_from_first_record": (t_end - t_first) if t_first else None,
                    "first_record_after_s": (t_first - t0) if t_first else None,
                    "write_batches": writes,
                    "state_check": {"ok": not wrong and not extra, "keys": len(state), "wrong_or_missing": wrong,
                                    "extra_keys": extra, "first_problems": problems},
                    "peak_rss_mb": C.peak_rss_mb(),
                    "cpu_s": C.cpu_seconds(),
                },
            )
        )
    except BaseException:  # noqa: BLE001
        q.put(("error", traceback.format_exc()))


def _build_brook(cfg: dict[str, Any], adder: Callable[[Any, Any, Any], Any]) -> Any:
    """The benchmark's topology through Brook's DSL (or, with ``--brook-api processor``, its
    Processor API). Raises _Unavailable if the runtime lacks what it needs."""
    from streaming import KafkaStreams, Serdes, StreamsBuilder

    if cfg.get("brook_api") == "processor":
        return KafkaStreams(_processor_topology(cfg, adder), cfg["streams_config"])
    b = StreamsBuilder()
    stream = b.stream(cfg["in_topic"], key_serde=Serdes.String(), value_serde=Serdes.Json())
    if not hasattr(stream, "group_by_key"):
        raise _Unavailable("the Brook runtime has no KStream.group_by_key yet (stateful DSL not implemented)")
    try:
        grouped = stream.group_by_key()
        if not hasattr(grouped, "aggregate"):
            raise _Unavailable("the Brook runtime's grouped stream has no aggregate() yet")
        totals = grouped.aggregate(lambda: {"count": 0, "sum": 0.0}, adder, materialized=STORE)
        totals.to_stream().to(cfg["out_topic"])
    except NotImplementedError as exc:
        raise _Unavailable(f"the Brook runtime does not implement group_by_key/aggregate yet: {exc!r}") from exc
    return KafkaStreams(b.build(), cfg["streams_config"])


def _processor_topology(cfg: dict[str, Any], adder: Callable[[Any, Any, Any], Any]) -> Any:
    """The same aggregation written with the Processor API: a persistent (RocksDB) key-value store
    ``totals`` with logging and caching on, and a processor that forwards every update -- one output
    record per input record, the ceiling's shape (the DSL's cache emits one per key per commit)."""
    try:
        from streaming import Serdes, Stores, Topology
        from streaming.processor import Processor
    except ImportError as exc:
        raise _Unavailable(f"the Brook runtime lacks the Processor API pieces: {exc!r}") from exc

    class Totals(Processor):
        def init(self, context):
            self.context = context
            self.store = context.get_state_store(STORE)

        def process(self, record):
            agg = self.store.get(record.key)
            agg = adder(record.key, record.value, {"count": 0, "sum": 0.0} if agg is None else agg)
            self.store.put(record.key, agg)
            self.context.forward(record.with_value(agg))

    store = Stores.key_value_store_builder(
        Stores.persistent_key_value_store(STORE), Serdes.String(), Serdes.Json()
    ).with_logging_enabled().with_caching_enabled()
    return (
        Topology()
        .add_source("source", cfg["in_topic"], key_serde=Serdes.String(), value_serde=Serdes.Json())
        .add_processor("aggregate", Totals, "source")
        .add_state_store(store, "aggregate")
        .add_sink("sink", cfg["out_topic"], "aggregate", key_serde=Serdes.String(), value_serde=Serdes.Json())
    )


class _Unavailable(Exception):
    pass


def _state_of(app: Any) -> str:
    try:
        return str(app.state)
    except Exception:  # noqa: BLE001
        return ""


def brook_main(cfg: dict[str, Any], q: "mp.Queue", stop: "mp.Event") -> None:
    """Brook's KafkaStreams running the aggregation until the parent sets ``stop``.

    The adder is the brief's lambda plus a probe: it counts calls and reports when the last input
    record has been aggregated (~0.1 us per record), so processing speed can be told apart from the
    wait for the next commit (Brook commits, and with caching emits, only every commit.interval.ms).
    """
    if not C.import_brook(q):
        return
    try:
        total = cfg["records"]
        seen = [0]
        probe: dict[str, float] = {}

        def adder(key, value, agg):
            seen[0] += 1
            if seen[0] == 1:
                probe["first"] = time.monotonic()
            elif seen[0] == total:
                probe["last"] = time.monotonic()
                q.put(("processed_all", probe["last"]))
            return {"count": agg["count"] + 1, "sum": agg["sum"] + value["amount"]}

        try:
            app = _build_brook(cfg, adder)
        except _Unavailable as exc:
            q.put(("unavailable", str(exc)))
            return
        states = C.record_states(app)
        q.put(("ready", None))
        t0 = time.monotonic()
        app.start()
        q.put(("started", t0))
        error = None
        while not stop.wait(0.1):
            state = _state_of(app)
            if "ERROR" in state.upper():
                error = C.app_error(app, state)
                q.put(("error", error))
                break
        close_s = C.close_app(app)
        metrics = C.app_metrics(app)
        q.put(
            (
                "done",
                {
                    "t0": t0,
                    "close_s": close_s,
                    "aggregated": seen[0],
                    "probe": {k: v - t0 for k, v in probe.items()},
                    "states": [(t - t0, new, old) for t, new, old in states],
                    "state_dir_bytes": _dir_bytes(cfg["streams_config"]["state.dir"]),
                    "peak_rss_mb": C.peak_rss_mb(),
                    "cpu_s": C.cpu_seconds(),
                    "error": error,
                    "metrics": metrics,
                },
            )
        )
    except BaseException:  # noqa: BLE001
        q.put(("error", traceback.format_exc()))


def brook_restore_main(cfg: dict[str, Any], q: "mp.Queue", stop: "mp.Event") -> None:
    """A fresh Brook instance (same application.id, empty state.dir) restoring the store from its
    changelog, timed with a restore listener. Stops by itself once the restore is complete."""
    if not C.import_brook(q):
        return
    try:
        try:
            app = _build_brook(cfg, lambda key, value, agg: {"count": agg["count"] + 1,
                                                             "sum": agg["sum"] + value["amount"]})
        except _Unavailable as exc:
            q.put(("unavailable", str(exc)))
            return
        if not hasattr(app, "set_global_state_restore_listener"):
            q.put(("unavailable", "the Brook runtime has no KafkaStreams.set_global_state_restore_listener yet"))
            return
        starts: list[tuple[float, str, str, Any, Any]] = []
        ends: list[tuple[float, str, str, int]] = []
        batches = [0, 0]  # calls, records
        last_event = [time.monotonic()]

        class Listener:
            def on_restore_start(self, topic_partition, store_name, start_offset, end_offset):
                last_event[0] = now = time.monotonic()
                starts.append((now, str(topic_partition), str(store_name), start_offset, end_offset))

            def on_batch_restored(self, topic_partition, store_name, batch_end_offset, num_restored):
                last_event[0] = time.monotonic()
                batches[0] += 1
                batches[1] += int(num_restored)

            def on_restore_end(self, topic_partition, store_name, total_restored):
                last_event[0] = now = time.monotonic()
                ends.append((now, str(topic_partition), str(store_name), int(total_restored)))

        app.set_global_state_restore_listener(Listener())
        states = C.record_states(app)
        expected = cfg["expected_restore_records"]
        q.put(("ready", None))
        t0 = time.monotonic()
        app.start()
        q.put(("started", t0))
        deadline = t0 + cfg["timeout"]
        outcome = None
        while outcome is None:
            if stop.wait(0.02):
                outcome = "stopped by the parent"
                break
            now = time.monotonic()
            state = _state_of(app).upper()
            restored = sum(e[3] for e in ends)
            running = state.endswith("RUNNING") and "NOT" not in state
            if "ERROR" in state:
                outcome = C.app_error(app, state)
            elif starts and len(ends) >= len(starts) and restored >= expected:
                outcome = "complete"
            elif running and len(ends) >= len(starts) and now - last_event[0] > 5.0:
                outcome = (f"RUNNING with {restored:,}/{expected:,} changelog records restored "
                           f"({len(starts)} restore starts, {len(ends)} ends)")
            elif now > deadline:
                outcome = f"restore not complete after {cfg['timeout']:.0f}s ({restored:,}/{expected:,})"
        # Untimed: does the restored store hold the oracle's totals? (interactive query, optional)
        store_check: dict[str, Any]
        try:
            store = app.store(STORE)
            wrong, problems = 0, []
            for key, want in cfg["oracle"].items():
                got = store.get(key)
                prob = f"{key}: missing" if got is None else _agg_problem(key, got, want)
                if prob:
                    wrong += 1
                    if len(problems) < 5:
                        problems.append(prob)
            store_check = {"ok": not wrong, "wrong_or_missing": wrong, "first_problems": problems}
        except Exception as exc:  # noqa: BLE001
            store_check = {"ok": None, "unavailable": repr(exc)}
        close_s = C.close_app(app)
        first_start = min((s[0] for s in starts), default=None)
        last_end = max((e[0] for e in ends), default=None)
        q.put(
            (
                "done",
                {
                    "t0": t0,
                    "outcome": outcome,
                    "records": sum(e[3] for e in ends),
                    "batch_records": batches[1],
                    "batches": batches[0],
                    "seconds": (last_end - first_start) if first_start is not None and last_end else None,
                    "first_restore_start_after_s": (first_start - t0) if first_start is not None else None,
                    "starts": [(t - t0, tp, st, so, eo) for t, tp, st, so, eo in starts],
                    "ends": [(t - t0, tp, st, n) for t, tp, st, n in ends],
                    "states": [(t - t0, new, old) for t, new, old in states],
                    "store_check": store_check,
                    "close_s": close_s,
                    "peak_rss_mb": C.peak_rss_mb(),
                    "cpu_s": C.cpu_seconds(),
                },
            )
        )
    except BaseException:  # noqa: BLE001
        q.put(("error", traceback.format_exc()))


# --------------------------------------------------------------------------------------------------
# Running the children and watching them from the outside
# --------------------------------------------------------------------------------------------------


class _Child:
    """A spawned side process, its queue and stop event; always stopped on exit."""

    def __init__(self, name: str, target: Callable, cfg: dict[str, Any], with_stop: bool) -> None:
        ctx = mp.get_context("spawn")
        self.name = name
        self.q = ctx.Queue()
        self.stop = ctx.Event()
        args = (cfg, self.q, self.stop) if with_stop else (cfg, self.q)
        self.proc = ctx.Process(target=target, args=args, name=f"bench-{name}", daemon=True)
        self.events: dict[str, Any] = {}

    def __enter__(self) -> "_Child":
        self.proc.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        if self.proc.is_alive():
            self.proc.join(10)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(5)
        if self.proc.is_alive():
            self.proc.kill()

    def pump(self, block: float = 0.0) -> None:
        C.pump(self.q, self.events, block)
        if "error" in self.events:
            raise C.SideFailed(f"{self.name} failed:\n{self.events['error']}")

    def wait_started(self, limit: float = 120.0) -> float:
        """Wait until the child is about to start its clock (imports and clients are not timed)."""
        t = time.monotonic()
        while "started" not in self.events:
            C.pump(self.q, self.events)
            if "unavailable" in self.events:
                raise C.SideUnavailable(self.events["unavailable"])
            self.pump()
            if not self.proc.is_alive() and self.q.empty() and "started" not in self.events:
                raise C.SideFailed(f"{self.name} process exited (code {self.proc.exitcode}) before starting")
            if time.monotonic() - t > limit:
                raise C.SideFailed(f"{self.name} did not start within {limit:.0f} s")
            time.sleep(0.02)
        return self.events["started"]

    def wait_done(self, limit: float) -> dict[str, Any]:
        deadline = time.monotonic() + limit
        while "done" not in self.events:
            self.pump(block=0.1)
            if not self.proc.is_alive() and self.q.empty() and "done" not in self.events:
                self.pump()
                raise C.SideFailed(f"{self.name} process exited (code {self.proc.exitcode}) without a report")
            if time.monotonic() > deadline:
                raise C.SideFailed(f"{self.name}: no report within {limit:.0f} s")
        return self.events["done"]


def _watch_side(
    broker: C.BrokerHandle, side: str, cfg: dict[str, Any], topics: dict[str, int]
) -> tuple[C.EndOffsetWatcher, C.CommittedOffsetsReader, dict[str, Any]]:
    """Create ``topics`` and start watching a side from the outside: the end offsets of its output
    topic and its group's committed offsets. Returns the two watchers and the start of its result."""
    bootstrap = broker.bootstrap_servers
    C.create_topics(bootstrap, topics)
    watcher = C.EndOffsetWatcher(bootstrap, cfg["out_topic"], PARTITIONS, cfg["consumer"])
    offsets = C.CommittedOffsetsReader(bootstrap, cfg["group_id"], cfg["in_topic"], PARTITIONS)
    res: dict[str, Any] = {"side": side, "group_id": cfg["group_id"], "output_topic": cfg["out_topic"],
                           "changelog_topic": cfg["changelog"]}
    return watcher, offsets, res


def _resources(report: dict[str, Any], records: int) -> dict[str, Any]:
    """A side's peak RSS and CPU (also per input record) from its own report, and the report."""
    return {
        "peak_rss_mb": round(report["peak_rss_mb"], 1),
        "cpu_s": round(report["cpu_s"], 2),
        "cpu_us_per_record": round(1e6 * report["cpu_s"] / records, 2),
        "report": report,
    }


def run_ceiling(broker: C.BrokerHandle, cfg: dict[str, Any], load: C.LoadResult,
                oracle: dict[str, tuple[int, float]], timeout: float) -> dict[str, Any]:
    bootstrap = broker.bootstrap_servers
    watcher, offsets, res = _watch_side(
        broker, "ceiling", cfg, {cfg["out_topic"]: PARTITIONS, cfg["changelog"]: PARTITIONS}
    )
    expected = load.records  # one output record per input record
    try:
        with _Child("ceiling", ceiling_main, cfg, with_stop=False) as child:
            t0 = child.wait_started()
            deadline = t0 + timeout
            cpu = C.CpuMeter(broker)
            t_first = None
            last_total, last_change = -1, time.monotonic()
            while True:
                tick = time.monotonic()
                total = watcher.refresh(drain_timeout=0.03)
                now = time.monotonic()
                if total != last_total:
                    last_total, last_change = total, now
                if total > 0 and t_first is None:
                    t_first = now
                if total >= expected:
                    t_done = now
                    break
                child.pump()
                if "done" in child.events and now - last_change > 3.0:
                    t_done = last_change
                    res["incomplete_output"] = True
                    break
                if not child.proc.is_alive() and "done" not in child.events:
                    child.pump()
                    raise C.SideFailed(f"ceiling died (exit {child.proc.exitcode}) with {total:,}/{expected:,} output")
                if now > deadline:
                    raise C.SideFailed(f"ceiling: only {total:,}/{expected:,} output records after {timeout:.0f}s")
                time.sleep(max(0.0, WATCH_INTERVAL_S - (time.monotonic() - tick)))
            cpu.record(res)
            report = child.wait_done(90)
            child.proc.join(30)
    finally:
        watcher.close()
    committed = offsets.read()
    offsets.close()
    marks = report["marks"]
    res.update(
        {
            "input_records": load.records,
            "output_records_watched": watcher.total,
            **C.output_timing(load.records, t0, t_done, t_first),
            "processing": _processing(load.records, marks.get("first"), marks.get("last_record")),
            "committed_offsets": committed,
            "committed_ok": all(committed.get(p, -1) == e for p, e in load.end_offsets.items()),
            "changelog_records_produced": report["stats"]["changelog_records"],
            **_resources(report, load.records),
        }
    )
    res["output_check"] = check_totals_topic(bootstrap, cfg["out_topic"], oracle, one_per_input=True)
    res["changelog_check"] = check_totals_topic(bootstrap, cfg["changelog"], oracle, one_per_input=False)
    res["output_records"] = res["output_check"]["records"]
    res["changelog_records"] = res["changelog_check"]["records"]
    return res


def _processing(records: int, first: float | None, last: float | None) -> dict[str, Any]:
    """Processing speed on the side's own clock (seconds relative to its t0)."""
    if last is None:
        return {"last_input_processed_s": None, "records_per_s": None, "records_per_s_from_first_record": None}
    out = {"last_input_processed_s": round(last, 3), "records_per_s": round(records / last, 1)}
    span = last - first if first is not None else None
    out["first_input_processed_s"] = round(first, 3) if first is not None else None
    out["records_per_s_from_first_record"] = round(records / span, 1) if span else None
    return out


def run_brook(broker: C.BrokerHandle, cfg: dict[str, Any], load: C.LoadResult,
              oracle: dict[str, tuple[int, float]], timeout: float) -> dict[str, Any]:
    bootstrap = broker.bootstrap_servers
    watcher, offsets, res = _watch_side(broker, "brook", cfg, {cfg["out_topic"]: PARTITIONS})
    ends = load.end_offsets
    try:
        with _Child("brook", brook_main, cfg, with_stop=True) as child:
            t0 = child.wait_started()
            deadline = t0 + timeout
            cpu = C.CpuMeter(broker)
            t_first = t_all_outputs = None
            while True:
                tick = time.monotonic()
                if offsets.caught_up(ends):
                    t_done = time.monotonic()
                    break
                total = watcher.refresh(drain_timeout=0.02)
                if total > 0 and t_first is None:
                    t_first = time.monotonic()
                if total >= load.records and t_all_outputs is None:  # caching off: one output per input
                    t_all_outputs = time.monotonic()
                child.pump()
                if not child.proc.is_alive():
                    child.pump()
                    raise C.SideFailed(f"brook process died (exit {child.proc.exitcode}) before committing the input")
                if time.monotonic() > deadline:
                    raise C.SideFailed(
                        f"brook: committed offsets {offsets.read()} short of {ends} after {timeout:.0f}s"
                    )
                time.sleep(max(0.0, WATCH_INTERVAL_S - (time.monotonic() - tick)))
            cpu.record(res)
            child.stop.set()
            report = child.wait_done(120)
            child.proc.join(30)
    finally:
        watcher.close()
    committed = offsets.read()
    offsets.close()
    probe = report.get("probe", {})
    res.update(
        {
            "input_records": load.records,
            **C.output_timing(load.records, t0, t_done, t_first, from_first=False),
            "processing": _processing(load.records, probe.get("first"), probe.get("last")),
            # the ceiling's own completion criterion (every output in the topic), met when every update is
            # emitted (caching off); Brook's completion above also waits for its next interval commit
            "seconds_to_all_outputs": round(t_all_outputs - t0, 3) if t_all_outputs is not None else None,
            "aggregated_records": report.get("aggregated"),
            "committed_offsets": committed,
            "committed_ok": all(committed.get(p, -1) == e for p, e in ends.items()),
            **_resources(report, load.records),
        }
    )
    if report.get("error"):
        raise C.SideFailed(f"brook: {report['error']}")
    res["output_check"] = check_totals_topic(bootstrap, cfg["out_topic"], oracle, one_per_input=False)
    try:
        res["changelog_check"] = check_totals_topic(bootstrap, cfg["changelog"], oracle, one_per_input=False,
                                                    timeout=60)
    except Exception as exc:  # noqa: BLE001 - e.g. the runtime named its changelog differently
        res["changelog_check"] = {"ok": False, "records": 0, "error": repr(exc), "first_problems": [repr(exc)]}
    res["output_records"] = res["output_check"]["records"]
    res["changelog_records"] = res["changelog_check"]["records"]
    return res


def run_ceiling_restore(cfg: dict[str, Any], timeout: float) -> dict[str, Any]:
    with _Child(f"ceiling restore of {cfg['topic']}", restore_main, cfg, with_stop=False) as child:
        child.wait_started()
        report = child.wait_done(timeout + 120)
        child.proc.join(30)
    n, s = report["records"], report["seconds"]
    ff = report["seconds_from_first_record"]
    return {
        "status": "ok",
        "changelog_topic": cfg["topic"],
        "records": n,
        "seconds": round(s, 4),
        "records_per_s": round(n / s, 1) if s else None,
        "first_record_after_s": _r(report["first_record_after_s"], 4),
        "records_per_s_from_first_record": round(n / ff, 1) if ff else None,
        "write_batches": report["write_batches"],
        "state_check": report["state_check"],
        "peak_rss_mb": round(report["peak_rss_mb"], 1),
        "cpu_s": round(report["cpu_s"], 2),
    }


def run_brook_restore(cfg: dict[str, Any], timeout: float) -> dict[str, Any]:
    with _Child("brook restore", brook_restore_main, cfg, with_stop=True) as child:
        child.wait_started()
        report = child.wait_done(timeout + 120)
        child.proc.join(30)
    n, s = report["records"], report["seconds"]
    res = {
        "status": "ok" if report["outcome"] == "complete" else "incomplete",
        "changelog_topic": cfg["changelog"],
        "outcome": report["outcome"],
        "records": n,
        "expected_records": cfg["expected_restore_records"],
        "seconds": round(s, 4) if s is not None else None,
        "records_per_s": round(n / s, 1) if s else None,
        "first_restore_start_after_s": _r(report["first_restore_start_after_s"], 3),
        "partitions_restored": len(report["ends"]),
        "batches": report["batches"],
        "store_check": report["store_check"],
        "peak_rss_mb": round(report["peak_rss_mb"], 1),
        "cpu_s": round(report["cpu_s"], 2),
        "report": report,
    }
    return res


def _r(x: float | None, digits: int) -> float | None:
    return None if x is None else round(x, digits)


# --------------------------------------------------------------------------------------------------
# Micro facts: the costs the ceiling is made of, measured in isolation (parent process, ~2 s)
# --------------------------------------------------------------------------------------------------


def micro_facts(bootstrap: str, producer_settings: dict[str, Any], workdir: Path, topic: str,
                keys: int = C.NUM_KEYS, rounds: int = 10) -> dict[str, Any]:
    """Per-operation costs for batches of ``keys`` dirty keys (one commit's worth at 10,000 keys)."""
    import orjson
    from confluent_kafka import Producer
    from rocksdict import Options, Rdict, WriteBatch, WriteOptions

    dumps = orjson.dumps
    ks = [f"k{i:05d}".encode() for i in range(keys)]
    aggs = [[100 + i % 50, round(3300.0 + (i * 37.11) % 500, 2) + 0.005 * (i % 7)] for i in range(keys)]
    n = keys * rounds
    out: dict[str, Any] = {"keys_per_batch": keys, "rounds": rounds}

    def per_op(seconds: float, ops: int) -> dict[str, float]:
        return {"us_per_op": round(1e6 * seconds / ops, 3), "ops_per_s": round(ops / seconds, 1)}

    t = time.perf_counter()
    for _ in range(rounds):
        for a in aggs:
            dumps({"count": a[0], "sum": a[1]})
    out["orjson_dumps_aggregate"] = per_op(time.perf_counter() - t, n)
    vals = [dumps({"count": a[0], "sum": a[1]}) for a in aggs]
    out["value_bytes"] = round(sum(map(len, vals)) / len(vals), 1)

    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    for wal in (False, True):
        db = Rdict(str(workdir / f"micro-wal-{wal}"), options=opts)
        wo = WriteOptions()
        wo.disable_wal = not wal
        put_s = write_s = 0.0
        for _ in range(rounds):
            t = time.perf_counter()
            wb = WriteBatch(raw_mode=True)
            for k, v in zip(ks, vals):
                wb.put(k, v)
            t2 = time.perf_counter()
            db.write(wb, wo)
            t3 = time.perf_counter()
            put_s += t2 - t
            write_s += t3 - t2
        name = "wal_on" if wal else "wal_off"
        out[f"writebatch_put_{name}"] = per_op(put_s, n)
        out[f"db_write_{name}"] = {**per_op(write_s, n), "ms_per_batch": round(1e3 * write_s / rounds, 3)}
        out[f"writebatch_total_{name}"] = per_op(put_s + write_s, n)
        if not wal:
            t = time.perf_counter()
            for _ in range(rounds):
                for k in ks:
                    db.get(k)
            out["rdict_get_hit"] = per_op(time.perf_counter() - t, n)
        db.close()

    producer = Producer({"bootstrap.servers": bootstrap, **producer_settings})
    for i in range(PARTITIONS):  # connect, InitProducerId, metadata: untimed
        producer.produce(topic, vals[0], ks[0], partition=i)
    producer.flush(60)
    rounds_s: list[tuple[float, float]] = []
    for _ in range(rounds):
        t = time.perf_counter()
        for i, (k, v) in enumerate(zip(ks, vals)):
            while True:
                try:
                    producer.produce(topic, v, k, partition=i % PARTITIONS)
                    break
                except BufferError:
                    producer.poll(0.01)
        t2 = time.perf_counter()
        producer.flush(60)
        rounds_s.append((t2 - t, time.perf_counter() - t2))
    produce_s = sum(r[0] for r in rounds_s)
    flush_s = sum(r[1] for r in rounds_s)
    flushes = sorted(r[1] for r in rounds_s)
    out["changelog_produce_call"] = per_op(produce_s, n)
    out["changelog_flush"] = {"ms_per_batch": round(1e3 * flush_s / rounds, 2),
                              "ms_median": round(1e3 * flushes[len(flushes) // 2], 2),
                              "ms_min": round(1e3 * flushes[0], 2), "ms_max": round(1e3 * flushes[-1], 2)}
    out["changelog_produce_and_flush"] = per_op(produce_s + flush_s, n)
    return out


# --------------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--records", type=int, default=1_000_000, help="input records (default 1,000,000)")
    p.add_argument("--bootstrap", help="use this running broker instead of starting the embedded one")
    p.add_argument("--only", choices=("ceiling", "brook"), help="run one side (and its restore) only")
    p.add_argument("--brook-first", action="store_true", help="run Brook before the ceiling (order check)")
    p.add_argument("--batch", type=int, default=1000,
                   help="ceiling and ceiling restore: consume(num_messages=N) (default 1000)")
    p.add_argument("--commit-interval-ms", type=int, default=int(C.COMMIT_INTERVAL_S * 1000),
                   help="commit interval of both sides (default 5000); shorter = more changelog records")
    p.add_argument("--cache-max-bytes", type=int, default=CACHE_MAX_BYTES,
                   help="Brook's statestore.cache.max.bytes (default 10 MiB; 0 = emit every update)")
    p.add_argument("--brook-api", choices=("dsl", "processor"), default="dsl",
                   help="Brook side through the DSL (default: group_by_key().aggregate(), the benchmark "
                        "proper) or the Processor API (logged, cached RocksDB store; one output per input)")
    p.add_argument("--wal", action="store_true",
                   help="ceiling: write RocksDB with the WAL on (default off, as Kafka Streams does)")
    p.add_argument("--consumer-set", action="append", metavar="KEY=VALUE",
                   help="override a consumer setting (all sides)")
    p.add_argument("--producer-set", action="append", metavar="KEY=VALUE",
                   help="override a producer setting (all sides)")
    p.add_argument("--brook-set", action="append", metavar="KEY=VALUE",
                   help="extra Brook config (e.g. poll.ms=10), Brook instances only")
    p.add_argument("--guarantee", choices=("at_least_once", "exactly_once_v2"), default="at_least_once",
                   help="Brook's processing.guarantee (default at_least_once); the ceiling is the same either way")
    p.add_argument("--no-restore", action="store_true", help="skip the restore phases")
    p.add_argument("--no-micro", action="store_true", help="skip the micro measurements")
    p.add_argument("--keep-state", action="store_true", help="keep the state directories (path printed)")
    p.add_argument("--timeout", type=float, default=900.0, help="max seconds per phase (default 900)")
    p.add_argument("--strict", action="store_true",
                   help="exit 3 when Brook misses a target (ratio 0.40, restore 200,000 records/s)")
    p.add_argument("--output", type=Path, help=f"results JSON (default bench/results/{NAME}.json)")
    args = p.parse_args(argv)
    if args.records < 1:
        p.error("--records must be positive")
    return args


def brook_config(app_id: str, bootstrap: str, state_dir: str, args: argparse.Namespace,
                 consumer: dict[str, Any], producer: dict[str, Any]) -> dict[str, str]:
    return {
        "application.id": app_id,
        "bootstrap.servers": bootstrap,
        "state.dir": state_dir,
        "processing.guarantee": args.guarantee,
        "commit.interval.ms": str(args.commit_interval_ms),
        "statestore.cache.max.bytes": str(args.cache_max_bytes),
        **C.brook_client_settings(consumer, producer),
        **C.parse_overrides(args.brook_set),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    consumer = {**C.CONSUMER_SETTINGS, **C.parse_overrides(args.consumer_set)}
    producer = {**C.PRODUCER_SETTINGS, **C.parse_overrides(args.producer_set)}
    commit_s = args.commit_interval_ms / 1000
    rid = C.run_id()
    in_topic = f"bench-{NAME}-in-{rid}"
    results: dict[str, Any] = {
        "benchmark": NAME,
        "workload": WORKLOAD,
        "run_id": rid,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": C.machine_info(),
        "settings": {
            "consumer": consumer,
            "producer": producer,
            "commit_interval_s": commit_s,
            "brook_cache_max_bytes": args.cache_max_bytes,
            "brook_api": args.brook_api,
            "brook_extra_config": C.parse_overrides(args.brook_set),
            "guarantee": args.guarantee,
            "ceiling_batch": args.batch,
            "ceiling_rocksdb_wal": args.wal,
            "partitions": PARTITIONS,
            "keys": C.NUM_KEYS,
        },
        "targets": {"ratio": TARGET_RATIO, "restore_records_per_s": TARGET_RESTORE_RPS},
        "sides": {},
        "restore": {},
    }
    exit_code = 0
    workdir = Path(tempfile.mkdtemp(prefix="brook-bench-stateful-"))
    print(f"brook bench: {NAME} -- {WORKLOAD}", flush=True)
    try:
        with C.broker(args.bootstrap) as handle:
            bootstrap = handle.bootstrap_servers
            print(f"broker: {bootstrap}{'' if args.bootstrap else ' (embedded, started for this run)'}", flush=True)
            results["bootstrap_servers"] = bootstrap
            results["embedded_broker"] = not args.bootstrap
            C.create_topics(bootstrap, {in_topic: PARTITIONS})
            print(f"loading {args.records:,} records into {in_topic} ({PARTITIONS} partitions) ...", flush=True)
            load = C.load_orders(bootstrap, in_topic, args.records, producer)
            t = time.monotonic()
            oracle = oracle_totals(args.records)
            results["input"] = {
                "topic": in_topic,
                "records": load.records,
                "keys": len(oracle),
                "avg_value_bytes": round(load.avg_value_bytes, 1),
                "load_seconds": round(load.seconds, 3),
                "load_records_per_s": round(load.records / load.seconds, 1),
                "end_offsets": load.end_offsets,
                "oracle_seconds": round(time.monotonic() - t, 2),
            }
            print(f"loaded in {load.seconds:.2f}s ({load.records / load.seconds:,.0f} records/s); "
                  f"{len(oracle):,} keys; avg value {load.avg_value_bytes:.0f} B", flush=True)

            if not args.no_micro:
                micro_topic = f"bench-{NAME}-micro-{rid}"
                C.create_topics(bootstrap, {micro_topic: PARTITIONS})
                try:
                    results["micro"] = micro_facts(bootstrap, producer, workdir, micro_topic)
                    print("micro: " + _micro_line(results["micro"]), flush=True)
                except Exception as exc:  # noqa: BLE001 - facts are optional
                    results["micro"] = {"error": repr(exc)}
                    print(f"micro: failed: {exc!r}", flush=True)

            sides = ["ceiling", "brook"] if args.only is None else [args.only]
            if args.brook_first:
                sides.reverse()
            for side in sides:
                app_id = f"bench-{NAME}-{side}-{rid}"
                cfg = {
                    "bootstrap": bootstrap,
                    "in_topic": in_topic,
                    "out_topic": f"bench-{NAME}-out-{side}-{rid}",
                    "changelog": changelog_topic(app_id, STORE),
                    "group_id": app_id,
                    "partitions": PARTITIONS,
                    "records": load.records,
                    "brook_api": args.brook_api,
                    "consumer": consumer,
                    "producer": producer,
                    "batch": args.batch,
                    "commit_interval_s": commit_s,
                    "disable_wal": not args.wal,
                    "timeout": args.timeout,
                    "state_dir": str(workdir / side),
                    "streams_config": brook_config(app_id, bootstrap, str(workdir / side), args, consumer, producer),
                }
                print(f"running {side} ...", flush=True)
                try:
                    if side == "ceiling":
                        res = run_ceiling(handle, cfg, load, oracle, args.timeout)
                    else:
                        res = run_brook(handle, cfg, load, oracle, args.timeout)
                except (C.SideUnavailable, C.SideFailed, TimeoutError) as exc:
                    results["sides"][side] = {"side": side, **C.phase_failure(side, exc)}
                    exit_code = max(exit_code, 2)
                    continue
                res["status"] = "ok"
                results["sides"][side] = res
                print(f"  {side}: {_side_line(res)}", flush=True)
                if not (res["output_check"]["ok"] and res["changelog_check"]["ok"] and res["committed_ok"]) \
                        or res.get("incomplete_output"):
                    exit_code = max(exit_code, 1)
                if args.no_restore:
                    continue

                # Restores of this side's changelog.
                changelog_records = res["changelog_records"]
                rcfg = {
                    "bootstrap": bootstrap,
                    "topic": cfg["changelog"],
                    "partitions": PARTITIONS,
                    "consumer": consumer,
                    "batch": args.batch,
                    "disable_wal": not args.wal,
                    "timeout": args.timeout,
                    "oracle": oracle,
                }
                phases: list[tuple[str, Callable[[], dict[str, Any]]]] = []
                if side == "brook":
                    bcfg = {**cfg, "oracle": oracle, "expected_restore_records": changelog_records,
                            "streams_config": {**cfg["streams_config"],
                                               "state.dir": str(workdir / "brook-restore")}}
                    phases.append(("brook", lambda bcfg=bcfg: run_brook_restore(bcfg, args.timeout)))
                phases.append((f"ceiling-of-{side}-changelog",
                               lambda rcfg={**rcfg, "state_dir": str(workdir / f"restore-{side}")}:
                               run_ceiling_restore(rcfg, args.timeout)))
                for name, run in phases:
                    print(f"restore: {name} ({changelog_records:,} changelog records) ...", flush=True)
                    try:
                        r = run()
                    except (C.SideUnavailable, C.SideFailed, TimeoutError) as exc:
                        results["restore"][name] = C.phase_failure(f"restore {name}", exc)
                        exit_code = max(exit_code, 2)
                        continue
                    results["restore"][name] = r
                    print(f"  restore {name}: {_restore_line(r)}", flush=True)
                    check = r.get("state_check") or r.get("store_check") or {}
                    if r["status"] != "ok":
                        exit_code = max(exit_code, 2)
                    if check.get("ok") is False or r["records"] != changelog_records:
                        exit_code = max(exit_code, 1)
    finally:
        if args.keep_state:
            print(f"state kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)

    results["ratio"] = _ratios(results)
    print()
    print(_report(results))
    path = C.write_results(NAME, results, args.output)
    print(f"\nresults: {C.rel_path(path)}")
    if args.strict:
        ratio = results["ratio"].get("total")
        brr = results["restore"].get("brook", {}).get("records_per_s")
        if (ratio is not None and ratio < TARGET_RATIO) or (brr is not None and brr < TARGET_RESTORE_RPS):
            exit_code = max(exit_code, 3)
    return exit_code


def _ratios(results: dict[str, Any]) -> dict[str, Any]:
    c, b = results["sides"].get("ceiling", {}), results["sides"].get("brook", {})
    if c.get("status") != "ok" or b.get("status") != "ok":
        return {"total": None, "processing": None, "processing_from_first_record": None}
    out: dict[str, Any] = {"total": round(b["records_per_s"] / c["records_per_s"], 3)}
    for name in ("records_per_s", "records_per_s_from_first_record"):
        bp, cp = b["processing"].get(name), c["processing"].get(name)
        key = "processing" if name == "records_per_s" else "processing_from_first_record"
        out[key] = round(bp / cp, 3) if bp and cp else None
    to_outputs = b.get("seconds_to_all_outputs")
    out["to_all_outputs"] = round(c["seconds"] / to_outputs, 3) if to_outputs else None
    out["meets_target"] = out["total"] >= TARGET_RATIO
    return out


def _side_line(res: dict[str, Any]) -> str:
    return (f"{res['seconds']:.2f}s, {res['records_per_s']:,.0f} records/s; "
            f"{res['output_records']:,} output records ({_check_summary(res['output_check'])}), "
            f"{res['changelog_records']:,} changelog records ({_check_summary(res['changelog_check'])})")


def _restore_line(r: dict[str, Any]) -> str:
    rps = r.get("records_per_s")
    check = r.get("state_check") or r.get("store_check") or {}
    ok = {True: "ok", False: "MISMATCH", None: "not checked"}[check.get("ok")]
    s = r.get("seconds")
    return (f"{r['records']:,} records in {s:.3f}s = {rps:,.0f} records/s; restored state {ok}"
            if rps and s else f"{r['records']:,} records; {r.get('outcome', '')}; restored state {ok}")


def _micro_line(m: dict[str, Any]) -> str:
    return (f"WriteBatch put+write {m['writebatch_total_wal_off']['us_per_op']:.2f} us/key "
            f"(WAL off), {m['writebatch_total_wal_on']['us_per_op']:.2f} us/key (WAL on); "
            f"changelog produce+flush {m['changelog_produce_and_flush']['us_per_op']:.2f} us/record; "
            f"orjson.dumps(agg) {m['orjson_dumps_aggregate']['us_per_op']:.2f} us")


def _n(x: Any) -> str:
    return "-" if x is None else f"{x:,.0f}"


def _report(results: dict[str, Any]) -> str:
    inp = results["input"]
    st = results["settings"]
    lines = [
        f"workload : {results['workload']}",
        f"input    : {inp['records']:,} records, {inp['keys']:,} keys, {PARTITIONS} partitions, "
        f"avg value {inp['avg_value_bytes']:.0f} B",
        f"load     : {inp['load_seconds']:.2f}s ({inp['load_records_per_s']:,.0f} records/s)",
        "settings : consumer " + ", ".join(f"{k}={v}" for k, v in st["consumer"].items())
        + "; producer " + ", ".join(f"{k}={v}" for k, v in st["producer"].items())
        + f"; commit every {st['commit_interval_s']:g}s; Brook API {st['brook_api']}, cache "
        f"{st['brook_cache_max_bytes']:,} B; "
        f"ceiling batch {st['ceiling_batch']}, RocksDB WAL {'on' if st['ceiling_rocksdb_wal'] else 'off'}",
        "",
    ]
    headers = ["side", "records", "seconds", "records/s", "1st out (s)", "last in done (s)",
               "proc rec/s", "proc rec/s 1st->last", "outputs", "changelog", "peak RSS MB", "CPU s",
               "broker CPU s", "check"]
    rows = []
    for name in ("ceiling", "brook"):
        r = results["sides"].get(name)
        if r is None:
            continue
        if r.get("status") != "ok":
            rows.append([name, f"{inp['records']:,}"] + ["-"] * 11 + [r.get("status", "?").upper()])
            continue
        pr = r["processing"]
        ok = r["output_check"]["ok"] and r["changelog_check"]["ok"] and r["committed_ok"]
        label = "brook (processor API)" if name == "brook" and st["brook_api"] == "processor" else name
        rows.append([
            label, f"{r['input_records']:,}", f"{r['seconds']:.2f}", _n(r["records_per_s"]),
            C.fmt_float(r.get("first_output_after_s")), C.fmt_float(pr.get("last_input_processed_s")),
            _n(pr.get("records_per_s")), _n(pr.get("records_per_s_from_first_record")), _n(r["output_records"]),
            _n(r["changelog_records"]), C.fmt_float(r.get("peak_rss_mb"), 0), C.fmt_float(r.get("cpu_s"), 1),
            C.fmt_float(r.get("broker_cpu_s"), 1),
            "ok" if ok else "MISMATCH",
        ])
    lines.append(C.fmt_table(headers, rows, "lrrrrrrrrrrrrl"))
    lines.append("")
    ratio = results.get("ratio", {})
    if ratio.get("total") is not None:
        verdict = "MEETS" if ratio["total"] >= TARGET_RATIO else "BELOW"
        lines.append(
            f"Brook ({results['settings'].get('guarantee', 'at_least_once')}) / ceiling: {ratio['total']:.2f} "
            f"(to completion) -- {verdict} the target of {TARGET_RATIO:.2f}; "
            f"processing only: {C.fmt_float(ratio.get('processing'))} (to last input aggregated), "
            f"{C.fmt_float(ratio.get('processing_from_first_record'))} (first to last input)"
            + (f"; to every output in the topic (the ceiling's criterion; caching off): "
               f"{ratio['to_all_outputs']:.2f}" if ratio.get("to_all_outputs") else "")
        )
    else:
        lines.append("Brook / ceiling: n/a (both sides must run)")
    c = results["sides"].get("ceiling", {})
    if c.get("status") == "ok":
        m, s = c["report"]["marks"], c["report"]["stats"]
        lines.append(
            f"ceiling, own clock: assigned {C.fmt_float(m.get('assigned'))}s, "
            f"first record {C.fmt_float(m.get('first'))}s, "
            f"last record {C.fmt_float(m.get('last_record'))}s, EOF {C.fmt_float(m.get('consumed'))}s, "
            f"final commit done {C.fmt_float(m.get('committed'))}s; "
            f"{s['commits']} commits: changelog loop (dumps+put+produce) {s['commit_loop_s']:.3f}s, "
            f"db.write {s['db_write_s']:.3f}s, flush {s['flush_s']:.3f}s, offset commit {s['offset_commit_s']:.3f}s "
            f"(longest commit {s['max_commit_s']:.3f}s); {c['cpu_us_per_record']:.2f} us CPU/record"
        )
    b = results["sides"].get("brook", {})
    if b.get("status") == "ok":
        running = C.first_running(b["report"].get("states", []))
        lines.append(
            f"brook: {'first RUNNING %.2fs, ' % running if running is not None else ''}"
            f"last input aggregated {C.fmt_float(b['processing'].get('last_input_processed_s'))}s, "
            f"offsets committed to the end {b['seconds']:.2f}s after start "
            f"(commit.interval.ms="
            f"{st['brook_extra_config'].get('commit.interval.ms', int(st['commit_interval_s'] * 1000))}), "
            f"close {C.fmt_float(b['report'].get('close_s'))}s; "
            f"{b['cpu_us_per_record']:.2f} us CPU/record"
        )

    lines.append("")
    rrows = []
    for name, r in results["restore"].items():
        if r.get("status") in ("unavailable", "failed"):
            rrows.append([name, "-", "-", "-", "-", r["status"].upper()])
            continue
        check = r.get("state_check") or r.get("store_check") or {}
        rrows.append([
            name, _n(r["records"]), C.fmt_float(r.get("seconds"), 3), _n(r.get("records_per_s")),
            _n(r.get("records_per_s_from_first_record")),
            {True: "ok", False: "MISMATCH", None: "not checked"}[check.get("ok")]
            + ("" if r["status"] == "ok" else f" ({r.get('outcome')})"),
        ])
    if rrows:
        lines.append(C.fmt_table(["restore", "changelog records", "seconds", "records/s",
                                  "rec/s from 1st record", "restored state"], rrows, "lrrrrl"))
        br = results["restore"].get("brook", {})
        if br.get("records_per_s"):
            verdict = "MEETS" if br["records_per_s"] >= TARGET_RESTORE_RPS else "BELOW"
            lines.append(f"Brook restore: {br['records_per_s']:,.0f} changelog records/s "
                         f"(first on_restore_start -> last on_restore_end) -- {verdict} the target of "
                         f"{TARGET_RESTORE_RPS:,}")
        elif "brook" in results["restore"]:
            lines.append(f"Brook restore: n/a ({br.get('status')}: {br.get('message', br.get('outcome', ''))})")
    m = results.get("micro")
    if m and "error" not in m:
        lines.append("")
        lines.append(
            f"micro ({m['keys_per_batch']:,} keys per batch, {m['value_bytes']:.0f}-byte values): "
            f"orjson.dumps(agg) {m['orjson_dumps_aggregate']['us_per_op']:.2f} us; "
            f"WriteBatch.put {m['writebatch_put_wal_off']['us_per_op']:.2f} us; db.write "
            f"{m['db_write_wal_off']['ms_per_batch']:.1f} ms/batch WAL off, "
            f"{m['db_write_wal_on']['ms_per_batch']:.1f} ms/batch WAL on "
            f"(put+write {m['writebatch_total_wal_off']['ops_per_s']:,.0f} / "
            f"{m['writebatch_total_wal_on']['ops_per_s']:,.0f} keys/s); "
            f"Rdict.get {m['rdict_get_hit']['us_per_op']:.2f} us"
        )
        lines.append(
            f"micro: changelog produce() {m['changelog_produce_call']['us_per_op']:.2f} us/record + flush "
            f"{m['changelog_flush']['ms_per_batch']:.1f} ms per {m['keys_per_batch']:,} (median "
            f"{m['changelog_flush']['ms_median']:.1f}, max {m['changelog_flush']['ms_max']:.1f}) "
            f"= {m['changelog_produce_and_flush']['ops_per_s']:,.0f} records/s"
        )
    for name in ("ceiling", "brook"):
        r = results["sides"].get(name, {})
        if r.get("status") == "ok":
            if not r["committed_ok"]:
                lines.append(f"WARNING {name}: committed offsets {r['committed_offsets']} != input ends")
            for what in ("output_check", "changelog_check"):
                if not r[what]["ok"]:
                    lines.append(f"WARNING {name} {what.replace('_', ' ')}: {_check_summary(r[what])}; "
                                 f"{r[what]['first_problems'][:3]}")
        if r.get("status") in ("failed", "unavailable"):
            lines.append(f"{name}: {r['status']}: {r['message'].strip().splitlines()[-1]}")
    for name, r in results["restore"].items():
        if r.get("status") in ("failed", "unavailable"):
            lines.append(f"restore {name}: {r['status']}: {r['message'].strip().splitlines()[-1]}")
        check = r.get("state_check") or r.get("store_check") or {}
        if check.get("ok") is False:
            lines.append(f"WARNING restore {name}: restored state wrong: {check.get('first_problems', [])[:3]}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
