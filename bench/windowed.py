"""Windowed throughput benchmark: a 1-minute tumbling count per key, suppressed to final results.

Workload: 1,000,000 order records (the values of bench/common.py, 10,000 keys) in a 4-partition topic,
one record per event-time millisecond (about 17 minutes of event time), 5% of them out of order: their
timestamp is moved back by 0-20 s. Brook counts per key and 1-minute tumbling window with a 10 s
grace, suppresses until the window closes and writes only the final counts (Kafka's time-windowed key
format, Long values). Records more than 10 s behind their partition's stream time for a closed window
are dropped and counted, exactly as the oracle below predicts.

Sides, one after the other against the same input, each in its own spawned process:

* ceiling -- bench/stateless.py's hand-written confluent-kafka loop (JSON decode, filter, map, encode,
             produce, commit every 5 s): the stateless ceiling of the same run, on the same input.
* brook   -- StreamsBuilder: stream -> group_by_key -> windowed_by(TimeWindows.of(60 s, grace=10 s))
             -> count() -> suppress(Suppressed.until_window_closes()) -> to_stream -> to(out);
             KafkaStreams with commit.interval.ms=5000 and the default 10 MiB record cache.

Brook's time runs from ``app.start()`` until the output holds every final result the oracle expects
(each window closed by its partition's last stream time). Afterwards the output is read back and must
equal the oracle exactly: each closed window once, with its count. Target: Brook >= 25% of the
ceiling's records/s.

    .venv/bin/python bench/windowed.py                 # 1,000,000 records, embedded broker
    .venv/bin/python bench/windowed.py --records 200000
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import struct
import sys
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from bench import common as C
from bench import stateless

NAME = "windowed"
PARTITIONS = 4
WINDOW_MS = 60_000
GRACE_MS = 10_000
MAX_DISORDER_MS = 20_000
TARGET_RATIO = 0.25
WORKLOAD = ("JSON in -> group_by_key -> windowed_by(1 min tumbling, grace 10 s) -> count -> "
            "suppress(until_window_closes) -> finals out")


# --------------------------------------------------------------------------------------------------
# Data and oracle
# --------------------------------------------------------------------------------------------------


def timestamp_of(n: int) -> int:
    """Record n's event time: one ms per record; every 20th (by hash) moved back by 0-20 s."""
    h = C._mix(n)
    ts = C.BASE_TS_MS + n
    if h % 20 == 7:
        ts -= (h >> 8) % MAX_DISORDER_MS
    return ts


def partition_of(key: str) -> int:
    from streaming.runtime.partitioning import partition_for_key
    return partition_for_key(key.encode(), PARTITIONS)


def load(bootstrap: str, topic: str, records: int, producer_settings: dict[str, Any]) -> C.LoadResult:
    """Produce the records to their murmur2 partitions (so the oracle knows each partition's order)."""
    import orjson
    from confluent_kafka import Producer

    ends: dict[int, int] = {}
    errors: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            ends[msg.partition()] = max(ends.get(msg.partition(), 0), msg.offset() + 1)

    producer = Producer({"bootstrap.servers": bootstrap, **producer_settings, "on_delivery": on_delivery,
                         "queue.buffering.max.messages": 500_000})
    passing = nbytes = 0
    t0 = time.monotonic()
    for n in range(records):
        value = C.value_of(n)
        passing += C.passes_filter(value)
        data = orjson.dumps(value)
        nbytes += len(data)
        key = C.key_of(n)
        while True:
            try:
                producer.produce(topic, key=key.encode(), value=data, timestamp=timestamp_of(n),
                                 partition=partition_of(key))
                break
            except BufferError:
                producer.poll(0.05)
        if n % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise RuntimeError(f"loading {topic}: records not delivered after 120 s")
    if errors:
        raise RuntimeError(f"loading {topic}: {len(errors)} delivery errors, first: {errors[0]}")
    return C.LoadResult(records, passing, nbytes, time.monotonic() - t0, ends)


def oracle(records: int) -> tuple[dict[tuple[str, int], int], int]:
    """The final counts Brook must write — ``(key, window start) -> count`` for every window closed by
    its partition's last stream time — and the number of records dropped as late."""
    stream_time = [-1] * PARTITIONS
    counts: Counter[tuple[str, int]] = Counter()
    partition_of_window: dict[tuple[str, int], int] = {}
    dropped = 0
    for n in range(records):
        key, ts = C.key_of(n), timestamp_of(n)
        p = partition_of(key)
        stream_time[p] = max(stream_time[p], ts)
        start = ts - ts % WINDOW_MS
        if start + WINDOW_MS <= stream_time[p] - GRACE_MS:
            dropped += 1
            continue
        counts[(key, start)] += 1
        partition_of_window[(key, start)] = p
    finals = {window: count for window, count in counts.items()
              if window[1] + WINDOW_MS <= stream_time[partition_of_window[window]] - GRACE_MS}
    return finals, dropped


def read_finals(bootstrap: str, topic: str) -> tuple[dict[tuple[str, int], int], int]:
    """The output as ``(key, window start) -> count``, and how many records repeated a window."""
    finals: dict[tuple[str, int], int] = {}
    repeats = 0
    for message in C.iter_topic(bootstrap, topic, PARTITIONS):
        raw = message.key()
        window = (raw[:-8].decode(), struct.unpack(">q", raw[-8:])[0])
        repeats += window in finals
        finals[window] = struct.unpack(">q", message.value())[0]
    return finals, repeats


# --------------------------------------------------------------------------------------------------
# Brook's side
# --------------------------------------------------------------------------------------------------


def brook_main(cfg: dict[str, Any], q: mp.Queue, stop: Any) -> None:
    if not C.import_brook(q):
        return
    try:
        from streaming import KafkaStreams, Serdes, StreamsBuilder, Suppressed, TimeWindows

        builder = StreamsBuilder()
        (builder.stream(cfg["in_topic"], key_serde=Serdes.String(), value_serde=Serdes.Json())
         .group_by_key()
         .windowed_by(TimeWindows.of(WINDOW_MS, grace=GRACE_MS))
         .count(materialized="windowed-counts")
         .suppress(Suppressed.until_window_closes())
         .to_stream()
         .to(cfg["out_topic"], value_serde=Serdes.Long()))
        app = KafkaStreams(builder.build(), cfg["streams_config"])
        states = C.record_states(app)
        q.put(("ready", None))
        t0 = time.monotonic()
        app.start()
        q.put(("started", t0))
        error = None
        while not stop.wait(0.25):
            state = str(getattr(app, "state", ""))
            if "ERROR" in state.upper():
                error = C.app_error(app, state)
                q.put(("error", error))
                break
        close_s = C.close_app(app)
        q.put(("done", {"t0": t0, "close_s": close_s, "states": [(t - t0, new, old) for t, new, old in states],
                        "peak_rss_mb": C.peak_rss_mb(), "cpu_s": C.cpu_seconds(), "error": error,
                        "metrics": C.app_metrics(app)}))
    except BaseException:  # noqa: BLE001 - report everything to the parent
        q.put(("error", traceback.format_exc()))


def run_brook(broker: C.BrokerHandle, cfg: dict[str, Any], load_result: C.LoadResult,
              expected: dict[tuple[str, int], int], timeout: float) -> dict[str, Any]:
    bootstrap = broker.bootstrap_servers
    ctx = mp.get_context("spawn")
    q, stop = ctx.Queue(), ctx.Event()
    C.create_topics(bootstrap, {cfg["out_topic"]: PARTITIONS})
    watcher = C.EndOffsetWatcher(bootstrap, cfg["out_topic"], PARTITIONS, cfg["consumer"])
    offsets = C.CommittedOffsetsReader(bootstrap, cfg["group_id"], cfg["in_topic"], PARTITIONS)
    proc = ctx.Process(target=brook_main, args=(cfg, q, stop), name="bench-brook", daemon=True)
    events: dict[str, Any] = {}
    result: dict[str, Any] = {"side": "brook", "group_id": cfg["group_id"], "output_topic": cfg["out_topic"]}
    proc.start()
    try:
        waited = time.monotonic()
        while "started" not in events:
            C.pump(q, events, block=0.05)
            if "error" in events or "unavailable" in events:
                raise C.SideFailed(f"brook failed before starting:\n{events.get('error') or events['unavailable']}")
            if time.monotonic() - waited > 120:
                raise C.SideFailed("brook did not start within 120 s")
        t0 = events["started"]
        cpu = C.CpuMeter(broker)
        t_first = t_done = None
        while True:
            total = watcher.refresh(drain_timeout=0.03)
            now = time.monotonic()
            if total and t_first is None:
                t_first = now
            if total >= len(expected):
                t_done = now
                break
            C.pump(q, events)
            if "error" in events:
                raise C.SideFailed(f"brook failed while running:\n{events['error']}")
            if not proc.is_alive():
                raise C.SideFailed(f"brook died (exit code {proc.exitcode}) with {total:,}/{len(expected):,} finals")
            if now - t0 > timeout:
                raise C.SideFailed(f"brook: only {total:,}/{len(expected):,} finals after {timeout:.0f} s")
            time.sleep(0.1)
        cpu.record(result)
        commit_deadline = time.monotonic() + C.COMMIT_INTERVAL_S + 15
        while time.monotonic() < commit_deadline and not offsets.caught_up(load_result.end_offsets):
            time.sleep(0.2)
        stop.set()
        deadline = time.monotonic() + 90
        while "done" not in events and time.monotonic() < deadline and (proc.is_alive() or not q.empty()):
            C.pump(q, events, block=0.2)
        proc.join(30)
    finally:
        stop.set()
        if proc.is_alive():
            proc.terminate()
            proc.join(5)
        watcher.close()
    committed = offsets.read()
    offsets.close()
    report = events.get("done") or {}
    got, repeats = read_finals(bootstrap, cfg["out_topic"])
    wrong = sum(1 for window, count in expected.items() if got.get(window) != count)
    extra = len(set(got) - set(expected))
    result.update({
        "input_records": load_result.records,
        "expected_finals": len(expected),
        **C.output_timing(load_result.records, t0, t_done, t_first),
        "committed_ok": all(committed.get(p, -1) == e for p, e in load_result.end_offsets.items()),
        "peak_rss_mb": round(report["peak_rss_mb"], 1) if "peak_rss_mb" in report else None,
        "cpu_s": round(report["cpu_s"], 2) if "cpu_s" in report else None,
        "report": report,
        "verification": {"ok": not wrong and not extra and not repeats, "finals": len(got), "wrong_or_missing": wrong,
                         "extra": extra, "repeated": repeats},
    })
    return result


# --------------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=1_000_000, help="input records (default 1,000,000)")
    p.add_argument("--bootstrap", help="use this running broker instead of starting the embedded one")
    p.add_argument("--only", choices=("ceiling", "brook"), help="run one side only")
    p.add_argument("--timeout", type=float, default=900.0, help="max seconds per side (default 900)")
    p.add_argument("--strict", action="store_true", help="exit 3 when Brook is below the target ratio")
    p.add_argument("--output", type=Path, help=f"results JSON (default bench/results/{NAME}.json)")
    args = p.parse_args(argv)
    if args.records < 1:
        p.error("--records must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    consumer, producer = dict(C.CONSUMER_SETTINGS), dict(C.PRODUCER_SETTINGS)
    rid = C.run_id()
    in_topic = f"bench-{NAME}-in-{rid}"
    results: dict[str, Any] = {"benchmark": NAME, "workload": WORKLOAD, "run_id": rid,
                               "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": C.machine_info(),
                               "target_ratio": TARGET_RATIO, "sides": {}}
    exit_code = 0
    print(f"brook bench: {NAME} -- {WORKLOAD}", flush=True)
    expected, dropped = oracle(args.records)
    results["oracle"] = {"finals": len(expected), "late_records_dropped": dropped}
    with C.broker(args.bootstrap) as handle:
        bootstrap = handle.bootstrap_servers
        C.create_topics(bootstrap, {in_topic: PARTITIONS})
        print(f"loading {args.records:,} records into {in_topic} (5% out of order) ...", flush=True)
        load_result = load(bootstrap, in_topic, args.records, producer)
        results["input"] = {"topic": in_topic, "records": load_result.records,
                            "load_seconds": round(load_result.seconds, 3), "end_offsets": load_result.end_offsets}
        print(f"oracle: {len(expected):,} final windows, {dropped:,} late records dropped", flush=True)
        for side in ["ceiling", "brook"] if args.only is None else [args.only]:
            out_topic, group_id = f"bench-{NAME}-out-{side}-{rid}", f"bench-{NAME}-{side}-{rid}"
            cfg = {"bootstrap": bootstrap, "in_topic": in_topic, "out_topic": out_topic, "group_id": group_id,
                   "partitions": PARTITIONS, "consumer": consumer, "producer": producer, "batch": 1000,
                   "commit_interval_s": C.COMMIT_INTERVAL_S, "timeout": args.timeout,
                   "streams_config": stateless.brook_config(group_id, bootstrap, consumer, producer)}
            print(f"running {side} ...", flush=True)
            try:
                if side == "ceiling":
                    res = stateless.run_side("ceiling", handle, in_topic, out_topic, group_id, load_result, cfg,
                                             args.timeout, verify=True)
                else:
                    res = run_brook(handle, cfg, load_result, expected, args.timeout)
            except (C.SideUnavailable, C.SideFailed, TimeoutError) as exc:
                results["sides"][side] = {"side": side, **C.phase_failure(side, exc)}
                exit_code = max(exit_code, 2)
                continue
            res["status"] = "ok"
            results["sides"][side] = res
            ok = res.get("verification", {}).get("ok", True)
            print(f"  {side}: {res['records_per_s']:,.0f} records/s in {res['seconds']:.1f} s; output "
                  f"{'verified' if ok else 'WRONG: ' + str(res.get('verification'))}", flush=True)
            if not ok:
                exit_code = max(exit_code, 1)
    sides = results["sides"]
    ratio = None
    if sides.get("ceiling", {}).get("status") == "ok" and sides.get("brook", {}).get("status") == "ok":
        ratio = round(sides["brook"]["records_per_s"] / sides["ceiling"]["records_per_s"], 3)
    results["ratio"] = {"total": ratio, "meets_target": ratio is not None and ratio >= TARGET_RATIO}
    print(f"\nBrook / stateless ceiling: {ratio} (target >= {TARGET_RATIO})")
    path = C.write_results(NAME, results, args.output)
    print(f"results: {C.rel_path(path)}")
    if args.strict and ratio is not None and ratio < TARGET_RATIO:
        exit_code = max(exit_code, 3)
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
