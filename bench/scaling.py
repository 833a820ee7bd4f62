"""Partition scaling 4 -> 8 (migrate) of an app with two key-value stores: the downtime, and the copy's and the
re-shard's records/s beside the raw consume ceiling of the same run.

Workload: ``--records`` input records (default 1,000,000) with as many distinct keys (``--keys``, default the same),
~20-byte string values, on a 4-partition topic. The app (``bench/scaling_app.py``) keeps two key-value stores over
them: a count per key and the last value per key, so each store's changelog holds ``--keys`` keys. In one run:

* setup (not timed): the input loaded; ``--workers`` (default 2) ``brook worker run`` processes with
  ``state.snapshot.location`` set drain it (the group's lag at 0), then are stopped. The moment the last one exited
  starts the downtime.
* ceiling -- a plain confluent-kafka consumer (assign, ``consume(num_messages=10000)``, no decoding) reads the
  same input to partition EOF on every partition, in this process, while nothing else runs.
* downtime -- what an operator's ``brook app scale APP --partitions 8`` then ``--execute`` does, in this process:
  the plan (the dry run), the Spark session start, :func:`assets.scaling.execute.execute_migration` (create, copy,
  re-shard and verify both stores, commit, epoch, fresh snapshots by compaction, switch), then the same number of
  workers started on the new generation; it ends when every worker's last state transition is ``-> RUNNING`` and
  every store of every new partition was loaded from a snapshot of the new changelogs.
* copy and re-shard records/s: the records of the input (copy) and of each changelog (re-shard, verification
  included) over their stage's seconds (``MigrationResult.stages``).

Checks (exit 1 on any failure): every store of every new task loaded a snapshot of the new generation's changelog
with as many keys in all as the old store had, and restored no changelog tail (no replay); the old and new
changelogs hold the same number of distinct keys per store, and the counts add up to the records. The target,
downtime under 2 minutes, is printed; ``--strict`` makes a miss exit 3.

    .venv/bin/python bench/scaling.py
    .venv/bin/python bench/scaling.py --records 100000      # smoke run
"""

from __future__ import annotations

import argparse
import os
import re
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from bench import common as C
from streaming.testing.workers import start_worker, stop_workers

NAME = "scaling"
APP = "bench-scaling"
TARGET_S = 120.0
BEFORE, AFTER = 4, 8
STORES = ("counts", "last")
TOPOLOGY = "bench.scaling_app:topology"
_LOADED = re.compile(r"store '([\w-]+)': loaded snapshot \w+ of (\S+)\[(\d+)\] \((\d+) keys")
_RESTORED = re.compile(r"restored store '([\w-]+)' of task \S+: (\d+) records")
_STATE = re.compile(r"state (\w+) -> (\w+)")


def load(bootstrap: str, topic: str, records: int, keys: int) -> float:
    """``records`` records over ``keys`` keys (murmur2), loaded as fast as the producer goes; the seconds."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, **C.PRODUCER_SETTINGS, "linger.ms": 50,
                         "batch.size": 1_000_000})
    t0 = time.monotonic()
    for n in range(records):
        while True:
            try:
                producer.produce(topic, f"value-{n:012d}".encode(), f"key-{n % keys:09d}".encode(),
                                 timestamp=C.BASE_TS_MS + n)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120):
        raise RuntimeError(f"loading {topic}: records left unacknowledged")
    return time.monotonic() - t0


def ceiling(bootstrap: str, topic: str, partitions: int, records: int) -> float:
    """Seconds a plain consumer takes to read ``topic`` (``records`` records) to EOF on every partition."""
    t0 = time.monotonic()
    read = sum(1 for _ in C.iter_topic(bootstrap, topic, partitions))
    seconds = time.monotonic() - t0
    if read != records:
        raise RuntimeError(f"the ceiling read {read:,} records of {topic}, expected {records:,}")
    return seconds


def write_spec(workdir: Path, bootstrap: str, topic: str) -> tuple[Path, Path]:
    """The platform spec (one app, its input on 4 partitions, snapshots under ``workdir``) and the worker config."""
    import yaml

    snapshots = str(workdir / "snapshots")
    config = workdir / "worker.yaml"
    config.write_text(yaml.safe_dump({"application.id": APP, "commit.interval.ms": 1000,
                                      "state.snapshot.location": snapshots}))
    spec = workdir / "platform.yaml"
    spec.write_text(yaml.safe_dump({
        "version": 1, "default_cluster": "embedded",
        "clusters": {"embedded": {"bootstrap_servers": bootstrap, "embedded": True}},
        "topics": {topic: {"partitions": BEFORE, "key": "string", "value": "string"}},
        "apps": {"counter": {"application_id": APP, "topology": TOPOLOGY, "config": str(config), "inputs": [topic],
                             "co_partitioned": [[topic]]}},
        "snapshots": {"location": snapshots}}))
    return spec, config


def run_workers(bootstrap: str, config: Path, workdir: Path, count: int) -> list[Any]:
    workdir.mkdir()
    settings = {f"consumer.{k}": v for k, v in C.CONSUMER_SETTINGS.items() if k not in C.RUNTIME_MANAGED_CONSUMER_KEYS}
    return [start_worker(bootstrap, TOPOLOGY, config, workdir, i, Path(_ROOT), settings) for i in range(count)]


def drain(bootstrap: str, topic: str, config: Path, workdir: Path, count: int, timeout: float) -> tuple[float, float]:
    """Workers until the group committed every input record, then stopped; (seconds to drain, time the last one
    exited)."""
    from streaming.testing.kafka import group_lag, wait_for

    workers = run_workers(bootstrap, config, workdir, count)
    t0 = time.monotonic()
    try:
        wait_for(lambda: group_lag(bootstrap, APP, topic, BEFORE) == 0 or any(w.poll() is not None for w in workers),
                 timeout, "the workers to commit every input record", interval=1.0)
        if any(w.poll() is not None for w in workers):
            raise RuntimeError(f"a worker exited while draining: {tail(workdir / 'worker-0.log')}")
        drained = time.monotonic() - t0
    finally:
        stop_workers(workers)
    return drained, time.monotonic()


def tail(path: Path, chars: int = 3000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else "(no log)"


def running(logs: list[str], stores: int, partitions: int) -> bool:
    """Every worker's last state transition is to RUNNING, and every store of every partition loaded a snapshot."""
    if not all((states := _STATE.findall(text)) and states[-1][1] == "RUNNING" for text in logs):
        return False
    loaded = {(m[0], m[2]) for text in logs for m in _LOADED.findall(text)}
    return len(loaded) >= stores * partitions


def restart(bootstrap: str, config: Path, workdir: Path, count: int, timeout: float) -> tuple[float, list[str]]:
    """Workers on the new generation until :func:`running`; (the time it held, the logs). The workers are stopped
    after that."""
    workers = run_workers(bootstrap, config, workdir, count)
    paths = [workdir / f"worker-{i}.log" for i in range(count)]
    deadline = time.monotonic() + timeout
    try:
        while True:
            logs = [p.read_text(errors="replace") if p.exists() else "" for p in paths]
            if running(logs, len(STORES), AFTER):
                return time.monotonic(), logs
            if any(w.poll() is not None for w in workers) or time.monotonic() > deadline:
                raise RuntimeError(f"the workers did not all reach RUNNING with their snapshots: {tail(paths[0])}")
            time.sleep(0.05)
    finally:
        stop_workers(workers)


def changelog_digest(bootstrap: str, topic: str, partitions: int, store: str) -> tuple[int, int]:
    """(distinct live keys, sum of the counts for ``counts`` / 0) of a changelog topic."""
    latest: dict[bytes, bytes | None] = {}
    for m in C.iter_topic(bootstrap, topic, partitions):
        latest[m.key()] = m.value()
    live = {k: v for k, v in latest.items() if v is not None}
    total = sum(struct.unpack(">q", v)[0] for v in live.values()) if store == "counts" else 0
    return len(live), total


def scale(spec_path: Path, bootstrap: str) -> tuple[Any, dict[str, float]]:
    """``brook app scale counter --partitions 8`` then ``--execute`` as the CLI does them: the migration's result
    and the seconds of the plan and the Spark session start."""
    from assets.platform_spec import load_platform_spec, repo_root
    from assets.resources import spark_resource
    from assets.scaling.execute import execute_migration
    from assets.scaling.jobs import plan_scaling

    spec = load_platform_spec(spec_path)
    client = {"bootstrap.servers": bootstrap}
    t0 = time.monotonic()
    plan, topology = plan_scaling(spec, "counter", client, AFTER)
    t1 = time.monotonic()
    spark = spark_resource(Path(os.environ["BENCH_SPARK_CONF"])).spark_session
    t2 = time.monotonic()
    result = execute_migration(spark, plan, topology, client, spec_path=spec_path,
                               snapshot_location=spec.snapshots.resolved_location(repo_root()),
                               input_configs={t: spec.topics[t].config for t in spec.topics},
                               progress=lambda line: print(f"  {line}", flush=True), keep_snapshots=spec.snapshots.keep)
    return result, {"plan": t1 - t0, "spark session": t2 - t1}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000, help="input records (copied by the scaling)")
    parser.add_argument("--keys", type=int, default=None, help="distinct keys (default: --records)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes, before and after")
    parser.add_argument("--timeout", type=float, default=900, help="seconds the drain and the restart may take")
    parser.add_argument("--restart-timeout", type=float, default=300,
                        help="seconds the restarted workers may take to be RUNNING")
    parser.add_argument("--strict", action="store_true", help="exit 3 when the downtime target is missed")
    args = parser.parse_args()
    keys = args.keys or args.records

    from assets.platform_spec import load_platform_spec
    from bench.orders_days import write_spark_conf

    failures: list[str] = []
    started = time.monotonic()
    with C.broker() as broker, tempfile.TemporaryDirectory(prefix="brook-bench-scaling-") as tmp:
        bootstrap, workdir = broker.bootstrap_servers, Path(tmp)
        topic = f"scaling-input-{C.run_id()}"
        os.environ["SCALE_BENCH_INPUT"] = topic
        spec_path, config = write_spec(workdir, bootstrap, topic)
        os.environ["BROOK_PLATFORM_SPEC"] = str(spec_path)
        os.environ["BENCH_SPARK_CONF"] = str(write_spark_conf(workdir))
        C.create_topics(bootstrap, {topic: BEFORE})
        load_s = load(bootstrap, topic, args.records, keys)
        print(f"loaded {args.records:,} records over {keys:,} keys on {BEFORE} partitions in {load_s:.1f} s")
        ceiling_s = ceiling(bootstrap, topic, BEFORE, args.records)
        print(f"ceiling: a plain consumer read them in {ceiling_s:.2f} s ({args.records / ceiling_s:,.0f} records/s)")
        drain_s, stopped = drain(bootstrap, topic, config, workdir / "before", args.workers, args.timeout)
        print(f"{args.workers} worker(s) drained the input in {drain_s:.1f} s (group join included); stopped")
        old_changelogs = {s: f"{APP}-{s}-changelog" for s in STORES}
        load_before = os.getloadavg()

        result, pre = scale(spec_path, bootstrap)
        migrated = time.monotonic()
        print(f"migrated {migrated - stopped:.1f} s after the stop: {pre | result.stages}", flush=True)
        try:
            ready, logs = restart(bootstrap, config, workdir / "after", args.workers, args.restart_timeout)
        except RuntimeError as exc:  # the figures of the migration are still shown; the downtime is a lower bound
            failures.append(str(exc)[:400])
            ready, logs = time.monotonic(), []
        load_after = os.getloadavg()
        downtime = ready - stopped
        app = load_platform_spec(spec_path).apps["counter"]
        new_changelogs = {s: app.physical_changelog(s) for s in STORES}

        # checks
        loaded = [(m[0], m[1], int(m[2]), int(m[3])) for text in logs for m in _LOADED.findall(text)]
        for store in STORES:
            placed = {p for s, t, p, _ in loaded if s == store and t == new_changelogs[store]}
            if placed != set(range(AFTER)):
                failures.append(f"store {store}: snapshots of {new_changelogs[store]} loaded for partitions "
                                f"{sorted(placed)}, not all {AFTER}")
            snapshot_keys = sum(k for s, t, _, k in loaded if s == store and t == new_changelogs[store])
            if snapshot_keys != keys:
                failures.append(f"store {store}: the new snapshots hold {snapshot_keys:,} keys, expected {keys:,}")
        replayed = sum(int(n) for text in logs for _, n in _RESTORED.findall(text))
        if replayed:
            failures.append(f"the restarted workers replayed {replayed:,} changelog records (expected 0: snapshots)")
        digests = {}
        for store in STORES:
            old = changelog_digest(bootstrap, old_changelogs[store], BEFORE, store)
            new = changelog_digest(bootstrap, new_changelogs[store], AFTER, store)
            digests[store] = {"old": old, "new": new}
            if old != new or old[0] != keys or (store == "counts" and old[1] != args.records):
                failures.append(f"store {store}: old changelog (keys, sum of counts) {old}, new {new}; expected "
                                f"{keys:,} keys" + (f", counts adding to {args.records:,}" if store == "counts" else ""))
    wall = time.monotonic() - started

    stages = {**pre, **result.stages, "workers to RUNNING": ready - migrated}
    copy_s = sum(s for name, s in result.stages.items() if name.startswith("copy "))
    reshard_s = {store: result.stages[f"reshard {store}"] for store in STORES}
    changelog_records = {store: keys for store in STORES}  # one update per key: each key appears once per store
    print()
    print(C.fmt_table(["stage", "seconds", "share"], [[name, f"{s:.2f}", f"{s / downtime:.0%}"]
                                                      for name, s in stages.items()]
                      + [["downtime: last worker stopped -> every worker RUNNING", f"{downtime:.2f}", "100%"]]))
    rows = [["raw consume ceiling (plain consumer, input)", f"{args.records:,}", f"{ceiling_s:.2f}",
             f"{args.records / ceiling_s:,.0f}", "1.00"],
            [f"copy {BEFORE} -> {AFTER} (input)", f"{result.copied:,}", f"{copy_s:.2f}", f"{result.copied / copy_s:,.0f}",
             f"{result.copied / copy_s / (args.records / ceiling_s):.2f}"]]
    rows += [[f"re-shard + verify {store}", f"{changelog_records[store]:,}", f"{s:.2f}",
              f"{changelog_records[store] / s:,.0f}", f"{changelog_records[store] / s / (args.records / ceiling_s):.2f}"]
             for store, s in reshard_s.items()]
    print()
    print(C.fmt_table(["what", "records", "seconds", "records/s", "vs ceiling"], rows))
    met = downtime < TARGET_S and bool(logs)
    print(f"\nload average before the scaling {load_before[0]:.2f}, after {load_after[0]:.2f} "
          f"({os.cpu_count()} CPUs); wall time of the whole run: {wall:.0f} s")
    if not logs:
        print(f"the restarted workers never all reached RUNNING: the downtime is more than {downtime:.1f} s")
    print(f"target: downtime under {TARGET_S:.0f} s with restore from the new snapshots: "
          f"{'met' if met and not failures else 'NOT met'} ({downtime:.1f} s)")
    for failure in failures:
        print(f"FAILED: {failure}")
    path = C.write_results(NAME, {
        "records": args.records, "keys": keys, "workers": args.workers, "partitions": [BEFORE, AFTER],
        "downtime_s": downtime, "stages_s": stages, "ceiling_s": ceiling_s, "copy_s": copy_s, "reshard_s": reshard_s,
        "drain_s": drain_s, "load_s": load_s, "digests": digests, "target_met": met, "failures": failures,
        "loadavg": {"before": load_before, "after": load_after}, "wall_s": wall, "machine": C.machine_info()})
    print(f"results: {C.rel_path(path)}")
    if failures:
        return 1
    return 3 if args.strict and not met else 0


if __name__ == "__main__":
    sys.exit(main())
