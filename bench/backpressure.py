"""Backpressure benchmark: peak memory of a worker whose processing is far slower than its input.

A Brook app whose processor sleeps 2 ms every 100 records (at most ~50,000 records/s, while the topic can
be read at 300,000+/s) and counts what it sees (no output topic, so producer memory plays no part), with
``max.poll.processing.ms=10``, so every poll brings more than one loop iteration processes. Two scenarios,
1,000,000 order records (~82-byte JSON values) in all:

* ``slow``  -- one topic, one partition. The loop's next poll takes no more than an iteration processed, so
  the buffer stays near one iteration's worth whatever the cap (at most one pause, after the first poll).
* ``ahead`` -- two topics read by one task (500,000 records each), the second 10^9 ms later in event time:
  the task processes the earlier records first (lowest timestamp first), so the later topic's records pile
  up in its buffer until ``buffered.records.per.partition`` pauses the partition.

Each scenario runs with ``buffered.records.per.partition=1000`` (the default, ``cap``) and with
1,000,000,000 (``huge``: never paused, the contrast), each in its own spawned process, which reports its
peak RSS (``VmHWM``: bench/common.peak_rss_mb), the largest buffer it saw (``brook_buffered_records``, sampled
every 50 ms), pauses and resumes, and checks that every input record was processed exactly once (a bitmap
of order ids).

    .venv/bin/python bench/backpressure.py                 # 1,000,000 records a scenario, embedded broker
    .venv/bin/python bench/backpressure.py --records 200000 --scenario ahead --only cap
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from bench import common as C

NAME = "backpressure"
HUGE_CAP = 1_000_000_000
SIDES = {"cap": 1000, "huge": HUGE_CAP}
SCENARIOS = ("slow", "ahead")
AHEAD_MS = 10**9  # how much later in event time the second topic of "ahead" is
SLEEP_EVERY = 100  # records
SLEEP_S = 0.002
SAMPLE_S = 0.05


def side_main(cfg: dict[str, Any], q: mp.Queue) -> None:
    """One Brook app with a slow processor, run until every record is processed; reports to ``q``."""
    try:
        from streaming import KafkaStreams, Serdes, StreamsBuilder

        seen = bytearray(cfg["records"])
        counts = {"records": 0, "duplicates": 0}

        def slow(key: str, value: dict[str, Any]) -> None:
            order = value["order_id"]
            if seen[order]:
                counts["duplicates"] += 1
            seen[order] = 1
            counts["records"] += 1
            if counts["records"] % SLEEP_EVERY == 0:
                time.sleep(SLEEP_S)

        builder = StreamsBuilder()
        builder.stream(cfg["topics"], key_serde=Serdes.String(), value_serde=Serdes.Json()).foreach(slow)
        app = KafkaStreams(builder.build(), cfg["streams_config"])
        peak = {"buffered": 0.0, "paused": 0.0}

        def sample() -> None:
            while counts["records"] < cfg["records"] and app.exception is None:
                for family in app.metrics_registry.collect():
                    for s in family.samples:
                        if s.name == "brook_buffered_records":
                            peak["buffered"] = max(peak["buffered"], s.value)
                        elif s.name == "brook_paused_partitions":
                            peak["paused"] = max(peak["paused"], s.value)
                time.sleep(SAMPLE_S)

        t0 = time.monotonic()
        app.start()
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        deadline = t0 + cfg["timeout"]
        while counts["records"] < cfg["records"] and app.exception is None and time.monotonic() < deadline:
            time.sleep(0.05)
        seconds = time.monotonic() - t0
        sampler.join(5)
        metrics = C.app_metrics(app)
        C.close_app(app)
        missing = cfg["records"] - sum(seen)
        q.put(("done", {
            "seconds": round(seconds, 2), "processed": counts["records"], "missing": missing,
            "duplicates": counts["duplicates"], "peak_rss_mb": round(C.peak_rss_mb(), 1),
            "peak_buffered": int(peak["buffered"]), "peak_paused": int(peak["paused"]),
            "pauses": metrics.get("backpressure_pauses") if isinstance(metrics, dict) else None,
            "resumes": metrics.get("backpressure_resumes") if isinstance(metrics, dict) else None,
            "error": repr(app.exception) if app.exception is not None else None}))
    except BaseException:  # noqa: BLE001 - reported to the parent
        q.put(("error", traceback.format_exc()))


def load(bootstrap: str, topic: str, ids: range, later_ms: int) -> None:
    """Produce the orders ``ids`` (bench/common's values) to ``topic``, timestamped ``later_ms`` after theirs."""
    import orjson
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, **C.PRODUCER_SETTINGS, "queue.buffering.max.messages": 500_000})
    for n in ids:
        value = C.value_of(n)
        while True:
            try:
                producer.produce(topic, key=C.key_of(n).encode(), value=orjson.dumps(value),
                                 timestamp=value["ts"] + later_ms)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120):
        raise RuntimeError(f"loading {topic}: records not delivered after 120 s")


def run_side(name: str, cap: int, bootstrap: str, topics: list[str], records: int, timeout: float,
             overrides: dict[str, str]) -> dict[str, Any]:
    """Run one side in a spawned process and return what it reported."""
    streams_config = {
        "application.id": f"bench-{NAME}-{name}-{C.run_id()}", "bootstrap.servers": bootstrap,
        "commit.interval.ms": 5000, "buffered.records.per.partition": cap, "max.poll.processing.ms": 10,
        **C.brook_client_settings(C.CONSUMER_SETTINGS, C.PRODUCER_SETTINGS), **overrides}
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    child = ctx.Process(target=side_main, args=({"topics": topics, "records": records, "timeout": timeout,
                                                  "streams_config": streams_config}, q), daemon=True)
    child.start()
    try:
        kind, payload = q.get(timeout=timeout + 60)
    finally:
        child.join(60)
        if child.is_alive():
            child.kill()
    if kind != "done":
        raise C.SideFailed(f"{name}: {payload}")
    return {"side": name, "cap": cap, **payload}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", type=int, default=1_000_000, help="input records a scenario (default 1,000,000)")
    p.add_argument("--bootstrap", help="use this running broker instead of starting the embedded one")
    p.add_argument("--timeout", type=float, default=300.0, help="max seconds per side (default 300)")
    p.add_argument("--scenario", choices=SCENARIOS, help="run one scenario only")
    p.add_argument("--only", choices=tuple(SIDES), help="run one side only")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="a Brook config key for every side")
    p.add_argument("--output", type=Path, help=f"results JSON (default bench/results/{NAME}.json)")
    args = p.parse_args()
    overrides = C.parse_overrides(args.set)

    print(f"brook bench: {NAME} -- a processor sleeping {SLEEP_S * 1000:.0f} ms every {SLEEP_EVERY} records, "
          f"max.poll.processing.ms=10")
    results = []
    with C.broker(args.bootstrap) as broker:
        bootstrap = broker.bootstrap_servers
        for scenario in SCENARIOS:
            if args.scenario and scenario != args.scenario:
                continue
            run = C.run_id()
            if scenario == "slow":
                topics = [f"bench-{NAME}-{run}-in"]
                C.create_topics(bootstrap, {topics[0]: 1})
                load(bootstrap, topics[0], range(args.records), 0)
            else:
                half = args.records // 2
                topics = [f"bench-{NAME}-{run}-early", f"bench-{NAME}-{run}-late"]
                C.create_topics(bootstrap, dict.fromkeys(topics, 1))
                load(bootstrap, topics[0], range(half), 0)
                load(bootstrap, topics[1], range(half, args.records), AHEAD_MS)
            print(f"{scenario}: loaded {args.records:,} records into {', '.join(topics)} (1 partition each)")
            for side, cap in SIDES.items():
                if args.only and side != args.only:
                    continue
                result = run_side(side, cap, bootstrap, topics, args.records, args.timeout, overrides)
                result["scenario"] = scenario
                print(f"  {side} (buffered.records.per.partition={cap:,}): {result['seconds']}s, "
                      f"peak RSS {result['peak_rss_mb']} MB, peak buffered {result['peak_buffered']:,}")
                results.append(result)

    def check(r: dict[str, Any]) -> str:
        if r["missing"] or r["duplicates"] or r["error"]:
            return f"missing {r['missing']}, duplicates {r['duplicates']}, error {r['error']}"
        return "ok"

    rows = [[r["scenario"], r["side"], f"{r['cap']:,}", f"{r['processed']:,}", r["seconds"],
             f"{r['processed'] / r['seconds']:,.0f}", r["peak_rss_mb"], f"{r['peak_buffered']:,}", r["pauses"],
             r["resumes"], check(r)] for r in results]
    print()
    print(C.fmt_table(["scenario", "side", "buffer cap", "records", "seconds", "records/s", "peak RSS MB",
                       "peak buffered", "pauses", "resumes", "check"], rows))
    for scenario in SCENARIOS:
        rss = {r["side"]: r["peak_rss_mb"] for r in results if r["scenario"] == scenario}
        if len(rss) == 2:
            print(f"{scenario}: peak RSS {rss['cap']} MB with the cap, {rss['huge']} MB without "
                  f"({rss['huge'] / rss['cap']:.1f}x)")
    path = C.write_results(NAME, {"records": args.records, "sides": results, "machine": C.machine_info()},
                           args.output)
    print(f"results: {C.rel_path(path)}")
    return 0 if all(check(r) == "ok" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
