"""The brook-kafka Spark data source: Arrow record batches vs rows, beside the raw consume ceiling.

Workload: 1,000,000 order records (bench/common.py's orders: 10,000 keys, ~82-byte JSON values) in a
4-partition topic. Three reads of the whole topic, each timed to completion:

* ceiling -- one plain confluent-kafka consumer reading every partition to EOF (no Spark);
* arrow   -- ``spark.read.format("brook-kafka")`` (``read()`` yields ``pyarrow.RecordBatch``es), every
  column materialized by Spark's ``noop`` writer;
* rows    -- the same reader yielding one tuple per record (Spark builds the Arrow batches).

Spark runs ``local[2]``; each Spark read is repeated (``--repeat``) and the best time is kept. The
SparkSession start is timed separately and not part of any figure.

    .venv/bin/python bench/kafka_source.py
    .venv/bin/python bench/kafka_source.py --records 200000 --repeat 1
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from bench import common as C

NAME = "kafka_source"
PARTITIONS = 4


def row_source() -> type:
    """A variant of the brook-kafka source whose ``read()`` yields tuples (the measured alternative)."""
    from pyspark.sql.datasource import DataSourceReader, InputPartition

    from assets.spark.kafka_source import KafkaDataSource, KafkaRange, KafkaReader, iter_range
    from assets.spark.options import parse_options

    stamp_types = {1: 0, 2: 1}

    class RowsReader(KafkaReader):
        def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:  # type: ignore[override]
            if not isinstance(partition, KafkaRange):
                return
            for messages in iter_range(self.options, partition):
                for m in messages:
                    kind, ms = m.timestamp()
                    yield (m.key(), m.value(), partition.topic, partition.partition, m.offset(),
                           datetime.fromtimestamp(ms / 1000, UTC) if kind in stamp_types else None,
                           stamp_types.get(kind, -1), m.headers())

    class KafkaRowsDataSource(KafkaDataSource):
        @classmethod
        def name(cls) -> str:
            return "brook-kafka-rows"

        def reader(self, schema: Any) -> DataSourceReader:
            return RowsReader(parse_options(self.options))

    return KafkaRowsDataSource


def spark_read_seconds(spark: Any, source: str, bootstrap: str, topic: str, expected: int) -> float:
    t0 = time.perf_counter()
    df = (spark.read.format(source).option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic).load())
    df.write.format("noop").mode("overwrite").save()
    seconds = time.perf_counter() - t0
    count = spark.read.format(source).option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic) \
        .load().count()
    if count != expected:
        raise SystemExit(f"{source} read {count} records, expected {expected}")
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--bootstrap", help="use a running broker instead of starting the embedded one")
    args = parser.parse_args()

    from assets.spark.session import local_spark_session

    with C.broker(args.bootstrap) as broker:
        topic = f"bench-source-{C.run_id()}"
        C.create_topics(broker.bootstrap_servers, {topic: PARTITIONS})
        load = C.load_orders(broker.bootstrap_servers, topic, args.records, C.PRODUCER_SETTINGS)
        print(f"loaded {load.records:,} records into {topic} in {load.seconds:.1f} s")

        t0 = time.perf_counter()
        consumed = sum(1 for _ in C.iter_topic(broker.bootstrap_servers, topic, PARTITIONS))
        ceiling_s = time.perf_counter() - t0
        assert consumed == args.records, f"ceiling read {consumed} records"

        t0 = time.perf_counter()
        spark = local_spark_session()
        spark.dataSource.register(row_source())
        print(f"SparkSession started in {time.perf_counter() - t0:.1f} s (not counted below)")

        best: dict[str, float] = {}
        for _ in range(args.repeat):
            for mode, source in (("arrow", "brook-kafka"), ("rows", "brook-kafka-rows")):
                seconds = spark_read_seconds(spark, source, broker.bootstrap_servers, topic, args.records)
                best[mode] = min(best.get(mode, seconds), seconds)
        spark.stop()

    rows = [["ceiling (confluent-kafka, 1 process)", f"{ceiling_s:.2f}", f"{args.records / ceiling_s:,.0f}", "1.00"]]
    for mode in ("arrow", "rows"):
        rows.append([f"spark {mode} (local[2])", f"{best[mode]:.2f}", f"{args.records / best[mode]:,.0f}",
                     f"{ceiling_s / best[mode]:.2f}"])
    print(C.fmt_table(["read", "seconds", "records/s", "vs ceiling"], rows))
    print(f"arrow / rows speed-up: {best['rows'] / best['arrow']:.2f}x")
    path = C.write_results(NAME, {
        "records": args.records, "partitions": PARTITIONS, "ceiling_s": ceiling_s,
        "arrow_s": best["arrow"], "rows_s": best["rows"], "machine": C.machine_info(),
    })
    print(f"results: {C.rel_path(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
