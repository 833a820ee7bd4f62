"""Restore with and without a changelog snapshot: time until a fresh instance's tasks are RUNNING.

Workload: the changelog of a ``count`` store (``group_by_key().count()``, a timestamped RocksDB store)
with 2,000,000 updates over 10,000 keys on 4 partitions, produced straight into
``<app>-counts-changelog`` (the embedded broker never compacts, so a restore replays all of it).
The platform's compaction (``assets.spark.compaction.compact_changelog``, Spark ``local[2]``) folds it
into a snapshot; then 1,000 more updates make a tail. In one run, each on a fresh state directory:

* **without** -- ``KafkaStreams`` restores all 2,001,000 changelog records;
* **with** -- the same app with ``state.snapshot.location``: loads the snapshot, restores the tail;
* **baseline** -- the same topology under another application id with an empty changelog: what a
  start costs with nothing to restore (mostly the ~3 s group join of the embedded broker).

Figures: seconds from ``start()`` to RUNNING for each; the restore part is that minus the baseline,
and the speed-up is (without - baseline) / (with - baseline). Target: at least 10x. Each restored
store is checked against the expected count of every key.

    .venv/bin/python bench/snapshot.py
    .venv/bin/python bench/snapshot.py --records 500000
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from bench import common as C
from streaming.naming import changelog_topic

NAME = "snapshot"
PARTITIONS = 4
KEYS = 10_000
STORE = "counts"
TARGET_SPEEDUP = 10.0


def topology(source: str) -> Any:
    from streaming import Serdes, StreamsBuilder

    builder = StreamsBuilder()
    builder.stream(source, key_serde=Serdes.String(), value_serde=Serdes.String()).group_by_key().count(
        materialized=STORE)
    return builder.build()


def load_changelog(bootstrap: str, topic: str, records: int, first: int, counts: dict[str, int], seed: int) -> None:
    """Produce ``records`` count updates (the count of a random key, +1 each) with their timestamps."""
    from confluent_kafka import Producer

    rng = random.Random(seed)
    producer = Producer({"bootstrap.servers": bootstrap, **C.PRODUCER_SETTINGS, "linger.ms": 20,
                         "queue.buffering.max.messages": 500_000})
    for n in range(first, first + records):
        key = f"k{rng.randrange(KEYS):05d}"
        counts[key] = counts.get(key, 0) + 1
        C.produce_waiting(producer, n, topic, key=key.encode(), value=counts[key].to_bytes(8, "big", signed=True),
                          timestamp=1_700_000_000_000 + n)
    if producer.flush(120):
        raise SystemExit(f"loading {topic}: records still unacknowledged after 120 s")


def time_to_running(bootstrap: str, app_id: str, source: str, extra: dict[str, Any],
                    expected: dict[str, int] | None) -> tuple[float, Any]:
    """Seconds from ``start()`` to RUNNING on a fresh state directory; checks the store against ``expected``."""
    from streaming import KafkaStreams
    from streaming.runtime.kafka_streams import State
    from streaming.testing import RestoreCounter

    restored = RestoreCounter()
    with tempfile.TemporaryDirectory(prefix="brook-bench-restore-") as state_dir:
        app = KafkaStreams(topology(source), {
            "application.id": app_id, "bootstrap.servers": bootstrap, "state.dir": state_dir,
            **{f"consumer.{k}": v for k, v in C.brook_config_strings(C.CONSUMER_SETTINGS).items()
               if k not in C.RUNTIME_MANAGED_CONSUMER_KEYS}, **extra})
        app.set_global_state_restore_listener(restored)
        started = time.perf_counter()
        app.start()
        try:
            while app.state is not State.RUNNING:
                if app.exception is not None or time.perf_counter() - started > 600:
                    raise SystemExit(f"{app_id} did not reach RUNNING: {app.exception or 'timeout'}")
                time.sleep(0.005)
            seconds = time.perf_counter() - started
            if expected is not None:
                store = dict(app.store(STORE).all())
                if store != expected:
                    wrong = sum(1 for k in expected.keys() | store.keys() if store.get(k) != expected.get(k))
                    raise SystemExit(f"{app_id} {extra or ''}: the restored store differs in {wrong} keys")
        finally:
            app.close(60)
    return seconds, restored


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=2_000_000, help="changelog updates before the snapshot")
    parser.add_argument("--tail", type=int, default=1_000, help="changelog updates after the snapshot")
    parser.add_argument("--bootstrap", help="use a running broker instead of starting the embedded one")
    args = parser.parse_args()

    from assets.spark.compaction import compact_changelog
    from assets.spark.session import local_spark_session

    counts: dict[str, int] = {}
    with (C.broker(args.bootstrap) as broker, tempfile.TemporaryDirectory(prefix="brook-bench-snap-") as location):
        bootstrap = broker.bootstrap_servers
        app_id, baseline_id = f"restore-{C.run_id()}", f"restore-baseline-{C.run_id()}"
        source, changelog = f"{app_id}-in", changelog_topic(app_id, STORE)
        C.create_topics(bootstrap, {source: PARTITIONS, changelog: PARTITIONS})
        t0 = time.perf_counter()
        load_changelog(bootstrap, changelog, args.records, 0, counts, seed=1)
        print(f"loaded {args.records:,} changelog records over {len(counts):,} keys in {time.perf_counter() - t0:.1f} s")

        spark = local_spark_session()
        manifest = compact_changelog(spark, client_config={"bootstrap.servers": bootstrap}, location=location,
                                     application_id=app_id, store=STORE, changelog_topic=changelog, keep=1).manifest
        spark.stop()
        print(f"snapshot {manifest.snapshot_id}: {manifest.keys:,} keys from {manifest.records_read:,} records "
              f"in {manifest.duration_s:.1f} s (Spark; not part of the restore figures)")
        load_changelog(bootstrap, changelog, args.tail, args.records, counts, seed=2)

        baseline_s, _ = time_to_running(bootstrap, baseline_id, source, {}, None)
        with_s, with_snapshot = time_to_running(bootstrap, app_id, source, {"state.snapshot.location": location},
                                                counts)
        without_s, without = time_to_running(bootstrap, app_id, source, {}, counts)

    total = args.records + args.tail
    assert without.changelog_records == total, f"the full restore read {without.changelog_records:,} records"
    assert with_snapshot.changelog_records == args.tail, f"the snapshot restore read {with_snapshot.changelog_records:,}"
    restore_without, restore_with = without_s - baseline_s, max(with_s - baseline_s, 1e-3)
    speedup = restore_without / restore_with
    rows = [
        ["without snapshot", f"{without.changelog_records:,}", "-", f"{without_s:.2f}", f"{restore_without:.2f}",
         f"{without.changelog_records / restore_without:,.0f}"],
        ["with snapshot", f"{with_snapshot.changelog_records:,}", f"{with_snapshot.snapshot_keys:,}", f"{with_s:.2f}",
         f"{restore_with:.2f}", "-"],
        ["baseline (nothing to restore)", "0", "-", f"{baseline_s:.2f}", "0", "-"],
    ]
    print(C.fmt_table(["start", "changelog records", "snapshot keys", "start->RUNNING s", "restore s",
                       "records/s"], rows))
    verdict = "MEETS" if speedup >= TARGET_SPEEDUP else "BELOW"
    print(f"restore with the snapshot is {speedup:.1f}x faster ({restore_without:.2f} s vs {restore_with:.2f} s "
          f"after the {baseline_s:.2f} s start) -- {verdict} the target of {TARGET_SPEEDUP:.0f}x; "
          f"start->RUNNING {without_s / with_s:.1f}x; both stores verified key by key")
    path = C.write_results(NAME, {
        "records": args.records, "tail": args.tail, "keys": len(counts), "partitions": PARTITIONS,
        "without_s": without_s, "with_s": with_s, "baseline_s": baseline_s, "speedup_restore": speedup,
        "snapshot_keys": with_snapshot.snapshot_keys, "machine": C.machine_info(),
    })
    print(f"results: {C.rel_path(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
