"""Changelog compaction throughput (Spark) beside the raw consume ceiling of the same changelog.

Workload: a 4-partition changelog of 2,000,000 updates over 10,000 keys (``k00000``.., 8-byte
values, 1% tombstones), produced with Kafka's partitioner. In one run:

* ceiling    -- one plain confluent-kafka consumer reads the changelog to EOF on every partition;
* compaction -- ``assets.spark.compaction.compact_changelog`` (what the Dagster asset runs) folds the
  whole changelog into a snapshot in ``local[2]``: plan, Spark read through ``brook-kafka``, latest
  value per key, Parquet write, fsync, manifest. Its time is the manifest's ``duration_s``. Run
  twice into two locations: "cold" is the session's first Spark job (as in a Dagster run, which
  starts its own session: JIT, Python workers, codegen), "warm" the same work again;
* tail       -- 100,000 more updates, compacted again: only the tail is read, merged with the snapshot;
* snapshot read -- the new snapshot read back with ``streaming.state.snapshots.read_partition`` (what a
  restoring worker does) and checked against the expected latest value of every key; and, as 10,000
  rows are too few to time, a synthetic one-partition snapshot of ``--read-rows`` rows (written with
  pyarrow, zstd like Spark's) read the same way.

The SparkSession start (~8 s) is timed separately and not part of any figure.

    .venv/bin/python bench/compaction.py
    .venv/bin/python bench/compaction.py --records 500000
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from bench import common as C

NAME = "compaction"
PARTITIONS = 4
KEYS = 10_000
TOMBSTONE_RATE = 0.01
APP, STORE = "bench", "counts"


def load_changelog(bootstrap: str, topic: str, records: int, first: int, latest: dict[bytes, bytes | None],
                   seed: int) -> float:
    """Produce ``records`` updates (record numbers from ``first``); track the latest value per key."""
    from confluent_kafka import Producer

    rng = random.Random(seed)
    producer = Producer({"bootstrap.servers": bootstrap, **C.PRODUCER_SETTINGS, "linger.ms": 20,
                         "queue.buffering.max.messages": 500_000})
    t0 = time.perf_counter()
    for n in range(first, first + records):
        key = b"k%05d" % rng.randrange(KEYS)
        value = None if rng.random() < TOMBSTONE_RATE else n.to_bytes(8, "big")
        latest[key] = value
        C.produce_waiting(producer, n, topic, key=key, value=value)
    if producer.flush(120):
        raise SystemExit(f"loading {topic}: records still unacknowledged after 120 s")
    return time.perf_counter() - t0


def time_big_snapshot_read(location: str, rows: int) -> float:
    """Seconds ``read_partition`` takes over a one-partition snapshot of ``rows`` 16-byte keys and 8-byte values."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from streaming.state import snapshots

    manifest = snapshots.SnapshotManifest(
        snapshot_id="00000001", application_id="synthetic", store=STORE, changelog_topic="synthetic",
        created_at=snapshots.utc_now_iso(), partitions={0: snapshots.PartitionSnapshot(rows, rows, rows)},
        records_read=rows, keys=rows, duration_s=0.0)
    directory = Path(location) / "synthetic" / STORE / manifest.data / "partition=0"
    directory.mkdir(parents=True)
    table = pa.table({"key": pa.array([b"key-%012d" % i for i in range(rows)], pa.binary()),
                      "value": pa.array([i.to_bytes(8, "big") for i in range(rows)], pa.binary()),
                      "offset": pa.array(range(rows), pa.int64()),
                      "timestamp": pa.array(range(rows), pa.int64())})
    pq.write_table(table, directory / "part-00000.zstd.parquet", compression="zstd")
    snapshots.write_manifest(location, manifest)
    t0 = time.perf_counter()
    count = sum(len(batch) for batch in snapshots.read_partition(location, manifest, 0))
    seconds = time.perf_counter() - t0
    assert count == rows, f"read {count} of {rows} rows"
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--tail", type=int, default=100_000)
    parser.add_argument("--read-rows", type=int, default=500_000)
    parser.add_argument("--bootstrap", help="use a running broker instead of starting the embedded one")
    args = parser.parse_args()

    from assets.spark.compaction import compact_changelog
    from assets.spark.session import local_spark_session
    from streaming.state import snapshots

    latest: dict[bytes, bytes | None] = {}
    with (C.broker(args.bootstrap) as broker, tempfile.TemporaryDirectory(prefix="brook-bench-snap-") as location,
          tempfile.TemporaryDirectory(prefix="brook-bench-snap-warm-") as warm_location):
        bootstrap = broker.bootstrap_servers
        topic = f"bench-changelog-{C.run_id()}"
        C.create_topics(bootstrap, {topic: PARTITIONS})
        load_s = load_changelog(bootstrap, topic, args.records, 0, latest, seed=1)
        print(f"loaded {args.records:,} changelog records ({len(latest):,} keys) in {load_s:.1f} s")

        t0 = time.perf_counter()
        consumed = sum(1 for _ in C.iter_topic(bootstrap, topic, PARTITIONS))
        ceiling_s = time.perf_counter() - t0
        assert consumed == args.records, f"ceiling read {consumed} records"

        t0 = time.perf_counter()
        spark = local_spark_session()
        print(f"SparkSession started in {time.perf_counter() - t0:.1f} s (not counted below)")

        def compact(where: str) -> snapshots.SnapshotManifest:
            return compact_changelog(spark, client_config={"bootstrap.servers": bootstrap}, location=where,
                                     application_id=APP, store=STORE, changelog_topic=topic, keep=2).manifest

        full = compact(location)
        warm = compact(warm_location)
        assert full.records_read == warm.records_read == args.records, f"compaction read {full.records_read} records"
        load_changelog(bootstrap, topic, args.tail, args.records, latest, seed=2)
        tail = compact(location)
        assert tail.records_read == args.tail, f"the tail compaction read {tail.records_read} records"
        spark.stop()

        t0 = time.perf_counter()
        snapshot = {k: v for p in range(PARTITIONS) for batch in snapshots.read_partition(location, tail, p)
                    for k, v, _ in batch}
        read_s = time.perf_counter() - t0
        expected = {k: v for k, v in latest.items() if v is not None}
        if snapshot != expected:
            wrong = sum(1 for k in expected.keys() | snapshot.keys() if snapshot.get(k) != expected.get(k))
            raise SystemExit(f"the snapshot differs from the latest values in {wrong} keys")
        print(f"snapshot verified: {len(snapshot):,} keys, the latest value of each; tombstoned keys absent")
        big_read_s = time_big_snapshot_read(warm_location, args.read_rows)

    rows = [
        ["ceiling: consume to EOF (1 process)", f"{args.records:,}", f"{ceiling_s:.2f}",
         f"{args.records / ceiling_s:,.0f}", "1.00"],
        *([f"compaction: whole changelog, {label}", f"{m.records_read:,}", f"{m.duration_s:.2f}",
           f"{m.records_read / m.duration_s:,.0f}", f"{ceiling_s / m.duration_s:.2f}"]
          for label, m in (("cold", full), ("warm", warm))),
        ["compaction: tail + previous snapshot", f"{tail.records_read:,}", f"{tail.duration_s:.2f}",
         f"{tail.records_read / tail.duration_s:,.0f}", ""],
        ["snapshot read (read_partition)", f"{len(snapshot):,} rows", f"{read_s:.3f}",
         f"{len(snapshot) / read_s:,.0f}", ""],
        ["snapshot read, synthetic partition", f"{args.read_rows:,} rows", f"{big_read_s:.3f}",
         f"{args.read_rows / big_read_s:,.0f}", ""],
    ]
    print(C.fmt_table(["step", "records", "seconds", "records/s", "vs ceiling"], rows))
    path = C.write_results(NAME, {
        "records": args.records, "keys": len(expected), "partitions": PARTITIONS, "ceiling_s": ceiling_s,
        "compaction_cold_s": full.duration_s, "compaction_warm_s": warm.duration_s, "tail_records": args.tail, "tail_s": tail.duration_s,
        "snapshot_read_s": read_s, "synthetic_read_rows": args.read_rows, "synthetic_read_s": big_read_s,
        "machine": C.machine_info(),
    })
    print(f"results: {C.rel_path(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
