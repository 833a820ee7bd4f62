"""CPU instructions per record of Brook's own processing path, counted by valgrind (callgrind): the same count
whatever else the machine is doing, so a change to the hot path can be measured in one run on a noisy machine.

A workload's topology (``stateless``, ``count_sum`` or ``tumbling``, as its benchmark builds it) runs broker-less in
one task (``TopologyTestDriver``: every record in partition 0, sends kept in memory and dropped after each batch), on
the benchmarks' orders, in batches of 1,000 with a commit every 125,000 records (about 5 s of one worker). It runs
twice under callgrind, over ``--records`` and twice as many; the difference over the extra records is the figure, so
the start-up, the imports and building the input cancel out. The sends go to memory, not to librdkafka, and time
spent waiting for memory is not counted: compare a change against its parent with this, then confirm on the broker
with the workload's own benchmark.

    .venv/bin/python bench/instructions.py tumbling [--records 60000]   # needs valgrind (Debian: valgrind)
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

WORKLOADS = ("stateless", "count_sum", "tumbling")
BATCH, COMMIT_EVERY = 1_000, 125_000


def run(workload: str, records: int, built: int) -> None:
    """Build ``built`` input records, process the first ``records`` of them (the part callgrind's runs differ by)."""
    import importlib

    import orjson
    from confluent_kafka import TIMESTAMP_CREATE_TIME, Message

    from bench import common as C
    from streaming.runtime import checkpoint
    from streaming.runtime.gc_tuning import raise_threshold0
    from streaming.testing.driver import TopologyTestDriver

    cfg = {"topics": ["in"], "out": "out", "cache_bytes": 0}  # count_sum: the cache-off workload
    topology, extra = importlib.import_module(f"bench.{workload}").brook(cfg)
    config = {"statestore.cache.max.bytes": str((10 << 20) // 4), **extra}  # a worker's 10 MiB over 4 tasks
    driver = TopologyTestDriver(topology, config)
    raise_threshold0(driver.config["python.gc.threshold0"])  # as KafkaStreams.start() does
    task, collector = driver._tasks[0], driver._collector
    messages = [Message(topic="in", partition=0, offset=n, key=C.key_of(n).encode(), value=orjson.dumps(value),
                        timestamp=(TIMESTAMP_CREATE_TIME, value["ts"]))
                for n in range(built) for value in (C.value_of(n),)]
    for start in range(0, records, BATCH):
        task.process_messages(messages[start:start + BATCH])
        if (start + BATCH) % COMMIT_EVERY == 0:
            checkpoint.commit(driver._tasks, collector)
        collector.pending.clear()
        collector.outputs.clear()
    checkpoint.commit(driver._tasks, collector)
    driver.close()


def instructions(workload: str, records: int, built: int) -> int:
    """The instructions callgrind counts for one :func:`run` in a fresh interpreter."""
    result = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
                             __file__, workload, "--run", str(records), "--built", str(built)],
                            capture_output=True, text=True, check=True,
                            # the same hashes, and no .pyc written by one run that the other would not compile
                            env={**os.environ, "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"})
    found = re.search(r"Collected : (\d+)", result.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count from callgrind:\n{result.stderr[-2000:]}")
    return int(found.group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workload", choices=WORKLOADS)
    parser.add_argument("--records", type=int, default=60_000,
                        help="the first run's records (the second: twice; 60,000 orders are one minute of event time)")
    parser.add_argument("--run", type=int, help=argparse.SUPPRESS)  # one run, inside callgrind
    parser.add_argument("--built", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run is not None:
        run(args.workload, args.run, args.built)
        return 0
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    small, large = args.records, 2 * args.records
    counts = [instructions(args.workload, records, large) for records in (small, large)]
    per_record = (counts[1] - counts[0]) / (large - small)
    print(f"{args.workload}: {per_record:,.0f} instructions per record (records {small:,} -> {large:,}: "
          f"{counts[0]:,} -> {counts[1]:,})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
