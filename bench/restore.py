"""Restore: a store rebuilt from a 1,000,000-record changelog over 10,000 keys (records/s), against a loop
that reads the changelog into RocksDB (rocksdict, one WriteBatch per
consumed batch of up to 10,000 records).

Brook's rate is timed inside its process by a restore listener, per restored batch (from the end of the
first batch to the end of the last); the store is then checked key by key. The loop is timed after each
batch. (Restoring from a snapshot instead: ``bench/snapshot.py``.)

    .venv/bin/python bench/restore.py [--records N]
"""

from __future__ import annotations

import multiprocessing as mp
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common as C
from bench import harness as H
from bench import snapshot


def _span(first: float, first_records: int, last: float, records: int, cpu0: float) -> dict[str, Any]:
    return {"records": records, "rate": (records - first_records) / (last - first) if last > first else None,
            "cpu_us_per_record": 1e6 * (C.cpu_seconds() - cpu0) / records, "peak_rss_mb": C.peak_rss_mb()}


def loop_side(bootstrap: str, changelog: str, records: int, state_dir: str) -> dict[str, Any]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    from rocksdict import Options, Rdict, WriteBatch

    db = Rdict(f"{state_dir}/loop", Options())
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "restore-loop", **C.CONSUMER_SETTINGS})
    consumer.assign([TopicPartition(changelog, p, OFFSET_BEGINNING) for p in range(H.PARTITIONS)])
    cpu0, done, first = C.cpu_seconds(), 0, None
    while done < records:
        messages = consumer.consume(10_000, 0.1)
        batch = WriteBatch()
        for m in messages:
            batch.put(m.key(), m.value())
        db.write(batch)
        done += len(messages)
        if messages and first is None:
            first, first_records = time.perf_counter(), len(messages)
    last = time.perf_counter()
    consumer.close()
    db.close()
    return _span(first, first_records, last, done, cpu0)


def brook_side(bootstrap: str, app_id: str, source: str, expected: dict[str, int], state_dir: str) -> dict[str, Any]:
    from streaming import KafkaStreams
    from streaming.runtime.kafka_streams import State
    from streaming.testing import RestoreCounter

    class Timed(RestoreCounter):
        first: float | None = None
        first_records = 0
        last = 0.0

        def on_batch_restored(self, tp: Any, store: str, end: int, num: int) -> None:
            super().on_batch_restored(tp, store, end, num)
            self.last = time.perf_counter()
            if self.first is None:
                self.first, self.first_records = self.last, num

    listener = Timed()
    app = KafkaStreams(snapshot.topology(source), {"application.id": app_id, "bootstrap.servers": bootstrap,
                                                   "state.dir": state_dir,
                                                   **C.brook_client_settings(C.CONSUMER_SETTINGS, {})})
    app.set_global_state_restore_listener(listener)
    cpu0 = C.cpu_seconds()
    app.start()
    try:
        while app.state is not State.RUNNING:
            if app.exception is not None:
                raise RuntimeError(f"Brook failed: {app.exception!r}")
            time.sleep(0.005)
        result = _span(listener.first, listener.first_records, listener.last, listener.changelog_records, cpu0)
        store = dict(app.store(snapshot.STORE).all())
        result["wrong_keys"] = sum(1 for k in expected.keys() | store.keys() if store.get(k) != expected.get(k))
    finally:
        closing = time.perf_counter()
        app.close(60)
    return {**result, "close_s": time.perf_counter() - closing}


def main(argv: list[str] | None = None) -> int:
    from streaming.naming import changelog_topic

    # One round: a second would find the first's restored state (and its app id's changelog) already there.
    with H.Run("restore", "restore a store from its changelog (10,000 keys)", argv, rounds=1) as run:
        app_id = f"bench-restore-{run.rid}"
        source, changelog = run.topic("in"), changelog_topic(app_id, snapshot.STORE)
        C.create_topics(run.bootstrap, {changelog: H.PARTITIONS})
        counts: dict[str, int] = {}
        snapshot.load_changelog(run.bootstrap, changelog, run.args.records, 0, counts, seed=1)
        with mp.get_context("spawn").Pool(1, maxtasksperchild=1) as pool:
            for label, fn, args in (("loop", loop_side, (run.bootstrap, changelog, run.args.records, run.state_dir)),
                                    ("brook", brook_side, (run.bootstrap, app_id, source, counts, run.state_dir))):
                print(f"  {label} ...", flush=True)
                result = pool.apply(fn, args)
                result.setdefault("close_s", 0.0)
                result["verified"] = result["records"] == run.args.records and not result.get("wrong_keys")
                if not result["verified"]:
                    run.problems.append(f"{label}: {result['records']:,} records restored, "
                                        f"{result.get('wrong_keys', 0)} keys wrong")
                run.sides[label] = result
                print(f"  {label}: {H.fmt_side(result)}", flush=True)
        rate = run.sides["brook"]["rate"]
        run.ratio("brook restore, million records/s", rate / 1e6 if rate else None, 1.0, 0.5)
        run.ratio("brook / loop, restore rate", rate, run.sides["loop"]["rate"], None)
        return run.finish()


if __name__ == "__main__":
    sys.exit(main())
