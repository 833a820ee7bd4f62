"""Batch reprocessing throughput of the orders pipeline beside the live workers' on the same input, same run.

Workload: ``--orders`` generated orders (default 100,000: days of 32,000-36,000 records) spread over three days and
the first hours of a fourth, with the generator and defects of ``tests/integration/test_reprocess_equals_live.py``
(10% out of order, 2% 2.5 h late, 5% duplicates, 5% invalid), 2,000 users and 200 items, all loaded into the
embedded broker before anything runs.
In one run:

* live   -- ``--workers`` (default 2) ``brook worker run`` processes of ``apps.orders:topology`` read the backlog.
  Their time runs from the first output record to the last (the group join excluded, as in the other benches),
  seen by a reader in this process; completion is every stage's group lag at 0.
* archive -- the input topics archived day by day through the ``archive/<topic>`` assets (not timed).
* batch  -- the three days reprocessed in order (``assets.reprocess.job.reprocess_days``, what a backfill runs) in
  Spark ``local[1]``, then ``local[2]``: each in its own spawned process (its own JVM and SparkSession) with its
  own reprocess root, so each starts from empty state. Time: ``reprocess_days`` (every day's input chosen from the
  archive, the Spark stages of all the days, outputs and state written; the SparkSession start is shown apart); per
  day the CPU seconds of its tasks (the days run in one set of stages, so a day has no wall time of its own).
* reference -- the same three days in this process with no Spark (``streaming.batch.run_day``, the same task code),
  to tell the topology's own cost from Spark's: Spark's overhead per day is the Spark seconds minus the reference's
  seconds divided by the cores, over the days.

Checks: every output topic of each batch run against what the workers wrote (per key, the batch's records are the
first live ones, in order), and the records per topic per day. The live run reads a backlog, so the hourly stage's
tasks run apart in event time by more than the pipeline's 30-minute grace: which lines are late (and so the hourly
finals) depend on timing live, and are compared only as counts (shown, not failed). Exit code 1 if an output that
does not depend on timing differs; the speed target (batch on 2 cores at least as fast as the live workers) is
printed, and fails the exit code (3) only with ``--strict``, as in the other benches.

    .venv/bin/python bench/reprocess.py                                   # 4-6 min
    .venv/bin/python bench/reprocess.py --orders 10000 --workers 1 --cores 2   # quick, 2-3 min
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import date, timedelta
from multiprocessing import get_context
from pathlib import Path
from typing import Any

_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from bench import common as C
from bench import orders_days as O
from streaming.testing.workers import start_worker, stop_workers

NAME = "reprocess"
FIRST_DAY = date(2023, 11, 14)
DAYS = [FIRST_DAY + timedelta(days=n) for n in range(3)]
TAIL_HOURS = 3.5  # of the fourth day: past the third day's frontier (midnight + the orders' 180-minute bound)
#: Outputs whose records depend on how far apart in event time the live tasks run (see the module doc).
TIMING_DEPENDENT = {"order-lines-late", "local-buyers-hourly"}


# -- live -----------------------------------------------------------------------------------------------------------

@dataclass
class LiveRun:
    """What the live workers did: their outputs, and when the first and last output arrived."""

    workers: int
    outputs: dict[str, list[O.Row]] = field(default_factory=dict)
    first: float | None = None
    last: float | None = None
    done: float = 0.0


def stages() -> list[str]:
    """The topics the live group reads: the orders and its two repartition topics."""
    from apps.orders import pipeline

    return [pipeline.ORDERS_TOPIC] + [f"{pipeline.APPLICATION_ID}-{name}-repartition"
                                      for name in ("lines-by-item-left", "lines-by-region")]


def output_topics() -> list[str]:
    from apps.orders import pipeline

    return list(pipeline.OUTPUT_TOPICS)


def drained(bootstrap: str) -> bool:
    """Whether the orders group has committed every record of every stage."""
    from streaming.testing.kafka import group_lag

    return all(group_lag(bootstrap, O.APP, topic, O.PARTITIONS) == 0 for topic in stages())


def watch_outputs(bootstrap: str, run: LiveRun, workers: list[Any], timeout: float) -> None:
    """Read every output topic as the workers write it, noting when the first and last record arrived, until every
    stage is drained and every output partition read to its end."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-watch-{C.run_id()}",
                         "enable.auto.commit": False, "enable.partition.eof": True, "fetch.queue.backoff.ms": 10,
                         "fetch.wait.max.ms": 50})
    partitions = [TopicPartition(t, p, OFFSET_BEGINNING) for t in output_topics() for p in range(O.PARTITIONS)]
    consumer.assign(partitions)
    at_end: set[tuple[str, int]] = set()
    deadline, next_check, all_committed = time.monotonic() + timeout, time.monotonic() + 1.0, False
    try:
        while not (all_committed and len(at_end) == len(partitions)):
            for message in consumer.consume(10_000, 0.1):
                error, tp = message.error(), (message.topic(), message.partition())
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        at_end.add(tp)
                    continue
                at_end.discard(tp)
                run.first, run.last = run.first or time.monotonic(), time.monotonic()
            if time.monotonic() >= next_check and not all_committed:
                if any(w.poll() is not None for w in workers):
                    raise C.SideFailed("a worker exited: see worker-*.log in the work directory")
                if time.monotonic() > deadline:
                    raise C.SideFailed(f"the live workers did not drain the input in {timeout:.0f} s")
                # Outputs are flushed before offsets are committed: once all is committed, no output is still to come.
                all_committed = run.first is not None and drained(bootstrap)
                next_check = time.monotonic() + 1.0
    finally:
        consumer.close()
    run.done = time.monotonic()


def run_live(bootstrap: str, workdir: Path, workers: int, settings: dict[str, str], timeout: float) -> LiveRun:
    """Start the workers on the loaded backlog and watch them until every stage is drained; then stop them."""
    run = LiveRun(workers)
    config = C.REPO_ROOT / "apps" / "orders" / "config.yaml"
    procs = [start_worker(bootstrap, "apps.orders:topology", config, workdir, index, C.REPO_ROOT, settings)
             for index in range(workers)]
    try:
        watch_outputs(bootstrap, run, procs, timeout)
    finally:
        stop_workers(procs)
    run.outputs = {topic: O.read_rows(bootstrap, topic) for topic in output_topics()}
    return run


# -- batch ----------------------------------------------------------------------------------------------------------

def batch_main(platform_path: str, spark_conf: str, root: str, cores: int) -> dict[str, Any]:
    """In a spawned process: reprocess the days in Spark ``local[cores]`` under ``root``; its figures."""
    from assets.reprocess.job import reprocess_days
    from assets.spark.session import read_spark_defaults, spark_session

    spec = O.with_reprocess_root(Path(platform_path), Path(root))
    t0 = time.monotonic()
    spark = spark_session({**read_spark_defaults(spark_conf), "spark.master": f"local[{cores}]"})
    t1 = time.monotonic()
    done = reprocess_days(spec, O.APP, DAYS[0], DAYS[-1], spark)
    t2 = time.monotonic()
    spark.stop()
    return {"cores": cores, "root": root, "session_s": t1 - t0, "seconds": t2 - t1,
            "records_in": sum(d.records_in for d in done),
            "days": [{"day": d.day.isoformat(), "records_in": d.records_in, "task_seconds": d.task_seconds,
                      "records_out": d.records_out} for d in done]}


def run_batch(platform_path: Path, spark_conf: Path, root: Path, cores: int) -> dict[str, Any]:
    """:func:`batch_main` in a fresh spawned process (its own JVM)."""
    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
        return pool.submit(batch_main, str(platform_path), str(spark_conf), str(root), cores).result()


def run_reference(platform_path: Path, root: Path) -> list[float]:
    """The days again with no Spark (``streaming.batch.run_day``), in this process, from the inputs the Spark run
    under ``root`` took; the seconds of each day's ``run_day``."""
    from assets.reprocess.inputs import replayed_records
    from assets.reprocess.job import check_app, prepare_day
    from streaming.batch import run_day
    from streaming.batch.day import DayState

    spec = O.with_reprocess_root(platform_path, root)
    checked = check_app(spec, O.APP)
    state, seconds = DayState(), []
    for day in DAYS:
        replayed = prepare_day(spec, O.APP, day, checked=checked).replayed
        records = replayed_records(spec.archive.root(), [replayed], replayed.ranges)[0]
        t0 = time.monotonic()
        state = run_day(checked.plan, checked.settings, records, state, spec.reprocess.chunk).state
        seconds.append(time.monotonic() - t0)
    return seconds


# -- checks and report ----------------------------------------------------------------------------------------------

def verify(live: LiveRun, root: Path) -> tuple[list[str], list[list[Any]]]:
    """Each batch output against the live one; returns the failures and a table of records per topic and day (of
    the records' timestamps: a day's run may write records of the next day)."""
    from apps.orders.protection import ClearJsonSerde
    from assets.reprocess.compare import compare_outputs, reprocessed_records

    clear = ClearJsonSerde().clear_bytes  # encrypted fields are compared in clear (random nonces)
    failures, rows = [], []
    for topic in output_topics():
        batch = reprocessed_records(root, O.APP, topic, DAYS)
        compared = compare_outputs(batch, live.outputs[topic], topic, clear_value=clear)
        days = zip(O.count_by_day(batch, DAYS), O.count_by_day(live.outputs[topic], DAYS))
        status = "equal" if compared.equal else ("differs (timing)" if topic in TIMING_DEPENDENT else "DIFFERS")
        rows.append([topic, *(f"{b:,} / {lv:,}" for b, lv in days), f"{len(batch):,} / {len(live.outputs[topic]):,}",
                     status])
        if not compared.equal and topic not in TIMING_DEPENDENT:
            failures.extend(f"{topic}: {p}" for p in compared.differences)
    return failures, rows


def rate(records: int, seconds: float | None) -> str:
    return f"{records / seconds:,.0f}" if seconds else "-"


def report(live: LiveRun, live_records: int, batches: list[dict[str, Any]], reference: list[float]) -> dict[str, Any]:
    """Print the throughput and per-day tables; return the figures for the results file."""
    assert live.first is not None and live.last is not None
    live_s = live.last - live.first
    live_rate = live_records / live_s
    rows = [[f"live, {live.workers} worker(s), 1st->last output", f"{live_records:,}", f"{live_s:.2f}",
             rate(live_records, live_s), "1.00", "-", "-"]]
    figures: dict[str, Any] = {"live": {"workers": live.workers, "records": live_records, "seconds": live_s,
                                        "records_per_s": live_rate}, "batch": []}
    for batch in batches:
        overhead = (batch["seconds"] - sum(reference) / batch["cores"]) / len(DAYS)
        batch_rate = batch["records_in"] / batch["seconds"]
        rows.append([f"batch, Spark local[{batch['cores']}], 3 days", f"{batch['records_in']:,}",
                     f"{batch['seconds']:.2f}", rate(batch["records_in"], batch["seconds"]),
                     f"{batch_rate / live_rate:.2f}", f"{batch['session_s']:.1f}",
                     f"{overhead:.2f}"])
        figures["batch"].append({**batch, "records_per_s": batch_rate, "overhead_s_per_day": overhead})
    ref_records = batches[0]["records_in"]
    rows.append(["reference: run_day, no Spark, 1 process", f"{ref_records:,}", f"{sum(reference):.2f}",
                 rate(ref_records, sum(reference)), f"{ref_records / sum(reference) / live_rate:.2f}", "-", "-"])
    figures["reference_s_per_day"] = reference
    print(C.fmt_table(["side", "input records", "seconds", "records/s", "vs live", "session s",
                       "Spark overhead s/day"], rows))
    day_rows = [[day.isoformat(), f"{batches[0]['days'][n]['records_in']:,}",
                 *(f"{b['days'][n]['task_seconds']:.2f}" for b in batches), f"{reference[n]:.2f}"]
                for n, day in enumerate(DAYS)]
    print()
    print(C.fmt_table(["day", "records in", *(f"local[{b['cores']}] task CPU s" for b in batches), "no Spark s"],
                      day_rows))
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--orders", type=int, default=100_000, help="orders over the three days and the tail")
    parser.add_argument("--workers", type=int, default=2, help="live worker processes")
    parser.add_argument("--cores", type=int, nargs="+", default=[1, 2], help="Spark local[N] runs, in order")
    parser.add_argument("--set", action="append", metavar="KEY=VALUE", help="a Streams setting for the workers")
    parser.add_argument("--timeout", type=float, default=600, help="seconds the live workers may take")
    parser.add_argument("--strict", action="store_true", help="exit 3 when the speed target is missed")
    args = parser.parse_args()

    from apps.orders import pipeline
    from apps.orders.protection import ensure_key
    from streaming.serdes import Serdes
    from streaming.testing.kafka import produce

    ensure_key()  # the pipeline encrypts with the key in BROOK_ORDERS_KEY_K1: one for the run, unless set
    started = time.monotonic()
    with C.broker() as broker, tempfile.TemporaryDirectory(prefix="brook-bench-reprocess-") as tmp:
        bootstrap, workdir = broker.bootstrap_servers, Path(tmp)
        inputs = [pipeline.ORDERS_TOPIC, pipeline.USERS_TOPIC, pipeline.ITEMS_TOPIC]
        C.create_topics(bootstrap, dict.fromkeys([*inputs, *output_topics()], O.PARTITIONS))
        t0 = time.monotonic()
        orders = O.generate_orders(args.orders, FIRST_DAY, len(DAYS), TAIL_HOURS)
        live_records = O.load_tables(bootstrap, FIRST_DAY) + len(orders)
        produce(bootstrap, pipeline.ORDERS_TOPIC, orders, Serdes.String(), Serdes.Json())
        print(f"loaded {live_records:,} input records ({len(orders):,} orders) in {time.monotonic() - t0:.1f} s")

        live = run_live(bootstrap, workdir, args.workers, C.parse_overrides(args.set), args.timeout)
        print(f"live: {args.workers} worker(s) drained the input {live.done - started:.1f} s into the run")
        platform_path, spark_conf = O.write_platform(workdir, FIRST_DAY), O.write_spark_conf(workdir)
        t0 = time.monotonic()
        with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
            pool.submit(O.archive_days, platform_path, spark_conf, bootstrap, inputs,
                        [*DAYS, DAYS[-1] + timedelta(days=1)]).result()
        print(f"archived {len(DAYS) + 1} days of {', '.join(inputs)} in {time.monotonic() - t0:.1f} s (not counted)")
        batches = []
        for cores in args.cores:
            batches.append(run_batch(platform_path, spark_conf, workdir / f"reprocessed-local{cores}", cores))
            print(f"batch local[{cores}]: {batches[-1]['seconds']:.1f} s (+ {batches[-1]['session_s']:.1f} s "
                  f"SparkSession start)")
        reference = run_reference(platform_path, Path(batches[0]["root"]))
        checks = [(batch["cores"], *verify(live, Path(batch["root"]))) for batch in batches]
    wall = time.monotonic() - started

    print()
    figures = report(live, live_records, batches, reference)
    failures = []
    for cores, problems, rows in checks:
        print(f"\noutputs of local[{cores}] against the live workers' (batch / live records, by timestamp day):")
        print(C.fmt_table(["topic", *(d.isoformat() for d in DAYS), "all", "check"], rows))
        failures.extend(f"local[{cores}] {p}" for p in problems)
    two = next((b for b in figures["batch"] if b["cores"] == 2), None)
    met = two is not None and two["records_per_s"] >= figures["live"]["records_per_s"]
    print(f"\ntarget: batch on local[2] at least as fast as the live workers: {'met' if met else 'NOT met'}"
          + (f" ({two['records_per_s'] / figures['live']['records_per_s']:.2f}x)" if two else " (no local[2] run)"))
    print(f"wall time of the whole run: {wall:.0f} s")
    for failure in failures:
        print(f"FAILED: {failure}")
    path = C.write_results(NAME, {"orders": len(orders), **figures, "target_met": met, "failures": failures,
                                  "wall_s": wall, "machine": C.machine_info()})
    print(f"results: {C.rel_path(path)}")
    if failures:
        return 1
    return 3 if args.strict and not met else 0


if __name__ == "__main__":
    sys.exit(main())
