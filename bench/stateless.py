"""Stateless throughput benchmark: JSON in, filter + map_values, JSON out.

Workload: 1,000,000 order records (10,000 keys, ~80-byte JSON values) in a 4-partition topic.
Keep orders with amount > 10 (~85%), add "big": amount > 50, write JSON to an output topic.

Two sides run against the same input, one after the other, with the same consumer and producer
settings (bench/common.py):

* ceiling -- a hand-written confluent-kafka loop, no framework: batch consume, orjson decode,
  filter, map, orjson encode, produce; commit synchronously every 5 s after producer.flush();
  single process, one consumer, reads until partition EOF on every partition.
* brook   -- the same topology through Brook's public API (StreamsBuilder / KafkaStreams).

Each side runs in its own spawned process (so import cost, RSS and CPU are per side). The parent
watches the output topic's true end offsets (see common.EndOffsetWatcher) and the group's committed
offsets. A side's time runs from just before subscribe / ``app.start()`` (so it includes the group
join, ~3 s on the embedded broker) until all expected output is in the output topic; "from first
output" excludes the join. Afterwards every output record is checked (each passing order exactly
once, right key, right value). Target: Brook >= 50% of the ceiling's records/s.

    .venv/bin/python bench/stateless.py                 # 1,000,000 records, embedded broker
    .venv/bin/python bench/stateless.py --records 100000
    .venv/bin/python bench/stateless.py --bootstrap 127.0.0.1:9092 --only ceiling --batch 5000
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

from bench import common as C  # noqa: E402

NAME = "stateless"
PARTITIONS = 4
TARGET_RATIO = 0.50
WATCH_INTERVAL_S = 0.1
WORKLOAD = "JSON in -> filter(amount > 10) -> map_values(+big) -> JSON out"


# --------------------------------------------------------------------------------------------------
# Child processes
# --------------------------------------------------------------------------------------------------


def ceiling_main(cfg: dict[str, Any], q: "mp.Queue") -> None:
    """The hand-written confluent-kafka loop (no framework). Reports internal timings to ``q``."""
    try:
        import orjson
        from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

        loads, dumps = orjson.loads, orjson.dumps
        in_topic, out_topic, batch = cfg["in_topic"], cfg["out_topic"], cfg["batch"]
        consumer = Consumer(
            {
                "bootstrap.servers": cfg["bootstrap"],
                "group.id": cfg["group_id"],
                **cfg["consumer"],
                "enable.partition.eof": True,
            }
        )
        producer = Producer({"bootstrap.servers": cfg["bootstrap"], **cfg["producer"]})
        produce, poll = producer.produce, producer.poll
        marks: dict[str, float] = {}
        assigned: set[int] = set()

        def on_assign(c, partitions):
            marks.setdefault("assigned", time.monotonic())
            assigned.update(tp.partition for tp in partitions)

        def commit() -> None:
            producer.flush()
            try:
                consumer.commit(asynchronous=False)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError._NO_OFFSET:
                    raise

        q.put(("ready", None))
        t0 = time.monotonic()
        q.put(("started", t0))
        consumer.subscribe([in_topic], on_assign=on_assign)
        deadline = t0 + cfg["timeout"]
        eof: set[int] = set()
        consumed = produced = commits = batches = 0
        last_commit = t0
        interval = cfg["commit_interval_s"]
        while len(eof) < cfg["partitions"]:
            msgs = consumer.consume(num_messages=batch, timeout=0.1)
            now = time.monotonic()
            if now > deadline:
                raise TimeoutError(
                    f"ceiling: input not consumed after {cfg['timeout']:.0f}s ({consumed:,} records)"
                )
            if msgs:
                batches += 1
            for m in msgs:
                if m.error() is not None:
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        eof.add(m.partition())
                        continue
                    raise KafkaException(m.error())
                eof.discard(m.partition())
                consumed += 1
                # The same filter and map as common.passes_filter / common.map_value, written inline
                # as a hand-written loop would be.
                v = loads(m.value())
                if v["amount"] > 10:
                    out = dumps({**v, "big": v["amount"] > 50})
                    while True:
                        try:
                            produce(out_topic, out, m.key(), timestamp=m.timestamp()[1])
                            break
                        except BufferError:
                            poll(0.01)
                    produced += 1
            if consumed and "first" not in marks:
                marks["first"] = now
            poll(0)
            if now - last_commit >= interval:
                commit()
                commits += 1
                last_commit = time.monotonic()
        marks["consumed"] = time.monotonic()
        remaining = producer.flush(60)
        if remaining:
            raise RuntimeError(f"ceiling: {remaining} records not delivered")
        marks["flushed"] = time.monotonic()
        commit()
        commits += 1
        marks["committed"] = time.monotonic()
        q.put(
            (
                "done",
                {
                    "t0": t0,
                    "marks": {k: v - t0 for k, v in marks.items()},
                    "consumed": consumed,
                    "produced": produced,
                    "commits": commits,
                    "consume_calls_with_records": batches,
                    "partitions_assigned": sorted(assigned),
                    "peak_rss_mb": C.peak_rss_mb(),
                    "cpu_s": C.cpu_seconds(),
                },
            )
        )
        consumer.close()
    except BaseException:  # noqa: BLE001 - report everything to the parent
        q.put(("error", traceback.format_exc()))


def brook_main(cfg: dict[str, Any], q: "mp.Queue", stop: "mp.Event") -> None:
    """Brook's KafkaStreams over the same topology, run until the parent sets ``stop``."""
    if not C.import_brook(q):
        return
    try:
        from streaming import KafkaStreams, Serdes, StreamsBuilder

        builder = StreamsBuilder()
        (
            builder.stream(cfg["in_topic"], key_serde=Serdes.String(), value_serde=Serdes.Json())
            .filter(lambda k, v: v["amount"] > 10)
            .map_values(lambda v: {**v, "big": v["amount"] > 50})
            .to(cfg["out_topic"], key_serde=Serdes.String(), value_serde=Serdes.Json())
        )
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
        metrics = C.app_metrics(app)
        q.put(
            (
                "done",
                {
                    "t0": t0,
                    "close_s": close_s,
                    "states": [(t - t0, new, old) for t, new, old in states],
                    "peak_rss_mb": C.peak_rss_mb(),
                    "cpu_s": C.cpu_seconds(),
                    "error": error,
                    "metrics": metrics,
                },
            )
        )
    except BaseException:  # noqa: BLE001
        q.put(("error", traceback.format_exc()))


# --------------------------------------------------------------------------------------------------
# Running one side and watching it from the outside
# --------------------------------------------------------------------------------------------------


def run_side(
    side: str,
    broker: C.BrokerHandle,
    in_topic: str,
    out_topic: str,
    group_id: str,
    load: C.LoadResult,
    child_cfg: dict[str, Any],
    timeout: float,
    *,
    verify: bool,
) -> dict[str, Any]:
    bootstrap = broker.bootstrap_servers
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    stop = ctx.Event()
    C.create_topics(bootstrap, {out_topic: PARTITIONS})
    watcher = C.EndOffsetWatcher(bootstrap, out_topic, PARTITIONS, child_cfg["consumer"])
    offsets_reader = C.CommittedOffsetsReader(bootstrap, group_id, in_topic, PARTITIONS)
    if side == "ceiling":
        proc = ctx.Process(target=ceiling_main, args=(child_cfg, q), name="bench-ceiling", daemon=True)
    else:
        proc = ctx.Process(target=brook_main, args=(child_cfg, q, stop), name="bench-brook", daemon=True)
    expected = load.passing
    input_ends = load.end_offsets
    events: dict[str, Any] = {}
    result: dict[str, Any] = {"side": side, "group_id": group_id, "output_topic": out_topic}
    t_start_wait = time.monotonic()
    proc.start()
    try:
        # 1. until the child says it started (imports + client construction are not timed)
        while "started" not in events:
            C.pump(q, events)
            if "unavailable" in events:
                raise C.SideUnavailable(events["unavailable"])
            if "error" in events:
                raise C.SideFailed(f"{side} failed before starting:\n{events['error']}")
            if not proc.is_alive() and q.empty():
                raise C.SideFailed(f"{side} process exited (code {proc.exitcode}) before starting")
            if time.monotonic() - t_start_wait > 120:
                raise C.SideFailed(f"{side} did not start within 120 s")
            time.sleep(0.05)
        t0 = events["started"]
        deadline = t0 + timeout
        cpu = C.CpuMeter(broker)

        # 2. until all expected output is in the output topic
        t_first = t_done = None
        last_total, last_change = -1, time.monotonic()
        next_commit_check = 0.0
        brook_caught_up = False
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
            C.pump(q, events)
            if "error" in events:
                raise C.SideFailed(f"{side} failed while running:\n{events['error']}")
            if side == "brook" and now >= next_commit_check:
                brook_caught_up = offsets_reader.caught_up(input_ends)
                next_commit_check = now + 1.0
            finished = "done" in events or brook_caught_up
            if finished and now - last_change > 3.0:
                # all input consumed (ceiling finished / Brook committed everything) yet output short
                t_done = last_change
                result["incomplete_output"] = True
                break
            if not proc.is_alive() and "done" not in events:
                C.pump(q, events)
                if "error" in events:
                    raise C.SideFailed(f"{side} failed while running:\n{events['error']}")
                raise C.SideFailed(
                    f"{side} process died (exit code {proc.exitcode}) with {total:,}/{expected:,} output"
                )
            if now > deadline:
                raise C.SideFailed(f"{side}: only {total:,}/{expected:,} output records after {timeout:.0f}s")
            time.sleep(max(0.0, WATCH_INTERVAL_S - (time.monotonic() - tick)))

        cpu.record(result)

        # 3. until the consumed offsets are committed (Brook commits every commit.interval.ms)
        t_committed = None
        commit_deadline = time.monotonic() + C.COMMIT_INTERVAL_S + 15
        while time.monotonic() < commit_deadline:
            if offsets_reader.caught_up(input_ends):
                t_committed = time.monotonic()
                break
            C.pump(q, events)
            if "error" in events:
                raise C.SideFailed(f"{side} failed while committing:\n{events['error']}")
            time.sleep(0.2)

        # 4. stop the side and collect its own report
        stop.set()
        done_deadline = time.monotonic() + 90
        while "done" not in events and time.monotonic() < done_deadline:
            C.pump(q, events, block=0.2)
            if "error" in events:
                raise C.SideFailed(f"{side} failed while stopping:\n{events['error']}")
            if not proc.is_alive() and q.empty() and "done" not in events:
                break
        if "done" not in events:
            result["stop_problem"] = "no report from the side within 90 s of stop"
        proc.join(30)
    finally:
        stop.set()
        if proc.is_alive():
            proc.join(10)
        if proc.is_alive():
            proc.terminate()
            proc.join(5)
        if proc.is_alive():
            proc.kill()
        watcher.close()

    committed_after = offsets_reader.read()
    offsets_reader.close()
    report = events.get("done") or {}
    result.update(
        {
            "input_records": load.records,
            "expected_output": expected,
            "output_records_watched": watcher.total,
            **C.output_timing(load.records, t0, t_done, t_first),
            "committed_caught_up_after_s": round(t_committed - t0, 3) if t_committed else None,
            "committed_offsets": committed_after,
            "input_end_offsets": input_ends,
            "committed_ok": all(committed_after.get(p, -1) == e for p, e in input_ends.items()),
            "peak_rss_mb": round(report["peak_rss_mb"], 1) if "peak_rss_mb" in report else None,
            "cpu_s": round(report["cpu_s"], 2) if "cpu_s" in report else None,
            "report": report,
        }
    )
    if verify:
        tv = time.monotonic()
        ver = C.verify_output(bootstrap, out_topic, PARTITIONS, load.records)
        result["verification"] = {
            "ok": ver.ok,
            "summary": ver.summary(),
            "records": ver.records,
            "expected": ver.expected,
            "missing": ver.missing,
            "duplicates": ver.duplicates,
            "wrong": ver.wrong,
            "first_problems": ver.first_problems,
            "seconds": round(time.monotonic() - tv, 2),
        }
    return result


# --------------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--records", type=int, default=1_000_000, help="input records (default 1,000,000)")
    p.add_argument("--bootstrap", help="use this running broker instead of starting the embedded one")
    p.add_argument("--only", choices=("ceiling", "brook"), help="run one side only")
    p.add_argument("--brook-first", action="store_true", help="run Brook before the ceiling (order check)")
    p.add_argument("--batch", type=int, default=1000, help="ceiling: consume(num_messages=N) (default 1000)")
    p.add_argument("--consumer-set", action="append", metavar="KEY=VALUE",
                   help="override a consumer setting (both sides)")
    p.add_argument("--producer-set", action="append", metavar="KEY=VALUE",
                   help="override a producer setting (both sides)")
    p.add_argument("--timeout", type=float, default=900.0, help="max seconds per side (default 900)")
    p.add_argument("--no-verify", action="store_true",
                   help="skip reading back and checking every output record")
    p.add_argument("--strict", action="store_true", help="exit 3 when Brook is below the target ratio")
    p.add_argument("--guarantee", choices=("at_least_once", "exactly_once_v2"), default="at_least_once",
                   help="Brook's processing.guarantee (default at_least_once); the ceiling is the same either way")
    p.add_argument("--brook-set", action="append", metavar="KEY=VALUE",
                   help="extra Brook config, e.g. commit.interval.ms=100 (repeatable)")
    p.add_argument("--output", type=Path, help=f"results JSON (default bench/results/{NAME}.json)")
    args = p.parse_args(argv)
    if args.records < 1:
        p.error("--records must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    consumer = {**C.CONSUMER_SETTINGS, **C.parse_overrides(args.consumer_set)}
    producer = {**C.PRODUCER_SETTINGS, **C.parse_overrides(args.producer_set)}
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
            "commit_interval_s": C.COMMIT_INTERVAL_S,
            "guarantee": args.guarantee,
            "brook_extra_config": C.parse_overrides(args.brook_set),
            "ceiling_batch": args.batch,
            "partitions": PARTITIONS,
            "keys": C.NUM_KEYS,
        },
        "target_ratio": TARGET_RATIO,
        "sides": {},
    }
    exit_code = 0
    print(f"brook bench: {NAME} -- {WORKLOAD}", flush=True)
    with C.broker(args.bootstrap) as handle:
        bootstrap = handle.bootstrap_servers
        where = "" if args.bootstrap else " (embedded, started for this run)"
        print(f"broker: {bootstrap}{where}", flush=True)
        results["bootstrap_servers"] = bootstrap
        results["embedded_broker"] = not args.bootstrap
        C.create_topics(bootstrap, {in_topic: PARTITIONS})
        print(f"loading {args.records:,} records into {in_topic} ({PARTITIONS} partitions) ...", flush=True)
        load = C.load_orders(bootstrap, in_topic, args.records, producer)
        results["input"] = {
            "topic": in_topic,
            "records": load.records,
            "passing_filter": load.passing,
            "avg_value_bytes": round(load.avg_value_bytes, 1),
            "load_seconds": round(load.seconds, 3),
            "load_records_per_s": round(load.records / load.seconds, 1),
            "end_offsets": load.end_offsets,
        }
        print(
            f"loaded in {load.seconds:.2f}s ({load.records / load.seconds:,.0f} records/s); "
            f"avg value {load.avg_value_bytes:.0f} B; {load.passing:,} pass the filter "
            f"({100 * load.passing / load.records:.1f}%)",
            flush=True,
        )
        sides = ["ceiling", "brook"] if args.only is None else [args.only]
        if args.brook_first:
            sides.reverse()
        for side in sides:
            out_topic = f"bench-{NAME}-out-{side}-{rid}"
            group_id = f"bench-{NAME}-{side}-{rid}"
            child_cfg = {
                "bootstrap": bootstrap,
                "in_topic": in_topic,
                "out_topic": out_topic,
                "group_id": group_id,
                "partitions": PARTITIONS,
                "consumer": consumer,
                "producer": producer,
                "batch": args.batch,
                "commit_interval_s": C.COMMIT_INTERVAL_S,
                "timeout": args.timeout,
                "streams_config": {**brook_config(group_id, bootstrap, consumer, producer, args.guarantee),
                                   **C.parse_overrides(args.brook_set)},
            }
            print(f"running {side} ...", flush=True)
            try:
                res = run_side(
                    side, handle, in_topic, out_topic, group_id, load, child_cfg, args.timeout,
                    verify=not args.no_verify,
                )
            except (C.SideUnavailable, C.SideFailed, TimeoutError) as exc:
                results["sides"][side] = {"side": side, **C.phase_failure(side, exc)}
                exit_code = max(exit_code, 2)
                continue
            res["status"] = "ok"
            results["sides"][side] = res
            print(f"  {side}: {_side_line(res)}", flush=True)
            if not res.get("verification", {}).get("ok", True) or res.get("incomplete_output"):
                exit_code = max(exit_code, 1)

    ratio = _ratios(results)
    results["ratio"] = ratio
    print()
    print(_report(results))
    path = C.write_results(NAME, results, args.output)
    print(f"\nresults: {C.rel_path(path)}")
    if args.strict and ratio.get("total") is not None and ratio["total"] < TARGET_RATIO:
        exit_code = max(exit_code, 3)
    return exit_code


def brook_config(
    app_id: str, bootstrap: str, consumer: dict[str, Any], producer: dict[str, Any],
    guarantee: str = "at_least_once",
) -> dict[str, str]:
    return {
        "application.id": app_id,
        "bootstrap.servers": bootstrap,
        "processing.guarantee": guarantee,
        "commit.interval.ms": str(int(C.COMMIT_INTERVAL_S * 1000)),
        **C.brook_client_settings(consumer, producer),
    }


def _ratios(results: dict[str, Any]) -> dict[str, Any]:
    sides = results["sides"]
    c, b = sides.get("ceiling", {}), sides.get("brook", {})
    if c.get("status") != "ok" or b.get("status") != "ok":
        return {"total": None, "from_first_output": None}
    out = {"total": round(b["records_per_s"] / c["records_per_s"], 3)}
    bf, cf = b.get("records_per_s_from_first_output"), c.get("records_per_s_from_first_output")
    if bf and cf:
        out["from_first_output"] = round(bf / cf, 3)
    else:
        out["from_first_output"] = None
    out["meets_target"] = out["total"] >= TARGET_RATIO
    return out


def _side_line(res: dict[str, Any]) -> str:
    line = f"{res['seconds']:.2f}s, {res['records_per_s']:,.0f} records/s"
    if res.get("verification"):
        line += f"; output {res['verification']['summary']}"
    return line


def _report(results: dict[str, Any]) -> str:
    inp = results["input"]
    st = results["settings"]
    lines = [
        f"workload : {results['workload']}",
        f"input    : {inp['records']:,} records, {C.NUM_KEYS:,} keys, {PARTITIONS} partitions, avg value "
        f"{inp['avg_value_bytes']:.0f} B; {inp['passing_filter']:,} pass the filter",
        f"load     : {inp['load_seconds']:.2f}s ({inp['load_records_per_s']:,.0f} records/s)",
        "settings : consumer "
        + ", ".join(f"{k}={v}" for k, v in results["settings"]["consumer"].items())
        + "; producer "
        + ", ".join(f"{k}={v}" for k, v in results["settings"]["producer"].items())
        + f"; commit every {st['commit_interval_s']:g}s; ceiling batch {st['ceiling_batch']}",
        "",
    ]
    headers = ["side", "records", "seconds", "records/s", "join+first (s)", "s from 1st out",
               "rec/s from 1st out", "peak RSS MB", "CPU s", "broker CPU s", "output check"]
    rows = []
    for name in ("ceiling", "brook"):
        r = results["sides"].get(name)
        if r is None:
            continue
        if r.get("status") != "ok":
            status = r.get("status", "?").upper()
            rows.append([name, f"{inp['records']:,}", "-", "-", "-", "-", "-", "-", "-", "-", status])
            continue
        ver = r.get("verification")
        rps_ff = r.get("records_per_s_from_first_output")
        check = ("ok" if ver["ok"] else "MISMATCH") if ver else "not checked"
        if ver and not ver["ok"]:
            check += f" ({ver['records']:,}/{ver['expected']:,})"
        rows.append(
            [
                name,
                f"{r['input_records']:,}",
                f"{r['seconds']:.2f}",
                f"{r['records_per_s']:,.0f}",
                C.fmt_float(r.get("first_output_after_s")),
                C.fmt_float(r.get("seconds_from_first_output")),
                f"{rps_ff:,.0f}" if rps_ff else "-",
                C.fmt_float(r.get("peak_rss_mb"), 0),
                C.fmt_float(r.get("cpu_s"), 1),
                C.fmt_float(r.get("broker_cpu_s"), 1),
                check,
            ]
        )
    lines.append(C.fmt_table(headers, rows, "lrrrrrrrrrl"))
    lines.append("")
    ratio = results.get("ratio", {})
    if ratio.get("total") is not None:
        verdict = "MEETS" if ratio["total"] >= TARGET_RATIO else "BELOW"
        ff = ratio.get("from_first_output")
        lines.append(
            f"Brook ({results['settings'].get('guarantee', 'at_least_once')}) / ceiling: {ratio['total']:.2f} (total)"
            + (f", {ff:.2f} (from first output)" if ff is not None else "")
            + f" -- {verdict} the target of {TARGET_RATIO:.2f}"
        )
    else:
        lines.append("Brook / ceiling: n/a (both sides must run)")
    c = results["sides"].get("ceiling", {})
    if c.get("status") == "ok" and c.get("report", {}).get("marks"):
        m = c["report"]["marks"]
        lines.append(
            f"ceiling, own clock: assigned {C.fmt_float(m.get('assigned'))}s, "
            f"first record {C.fmt_float(m.get('first'))}s, input consumed {C.fmt_float(m.get('consumed'))}s, "
            f"producer flushed {C.fmt_float(m.get('flushed'))}s"
        )
    b = results["sides"].get("brook", {})
    if b.get("status") == "ok":
        running = C.first_running(b.get("report", {}).get("states", []))
        extra = f"first RUNNING {running:.2f}s, " if running is not None else ""
        lines.append(
            f"brook: {extra}offsets committed to the end {C.fmt_float(b.get('committed_caught_up_after_s'))}s "
            f"after start (commit.interval.ms="
            f"{results['settings']['brook_extra_config'].get('commit.interval.ms', int(C.COMMIT_INTERVAL_S * 1000))}), "
            f"close {C.fmt_float(b.get('report', {}).get('close_s'))}s"
        )
    for name in ("ceiling", "brook"):
        r = results["sides"].get(name, {})
        if r.get("status") == "ok" and not r.get("committed_ok"):
            lines.append(
                f"WARNING {name}: committed offsets {r['committed_offsets']} "
                f"!= input ends {r['input_end_offsets']}"
            )
        if r.get("verification") and not r["verification"]["ok"]:
            ver = r["verification"]
            lines.append(f"WARNING {name}: output {ver['summary']}; {ver['first_problems'][:3]}")
        if r.get("status") in ("failed", "unavailable"):
            lines.append(f"{name}: {r['status']}: {r['message'].strip().splitlines()[-1]}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
