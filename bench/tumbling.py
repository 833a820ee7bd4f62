"""1-minute tumbling count per key, finals only (``suppress(until_window_closes)``), against the stateless loop.

The orders are one millisecond apart (1,000,000 records: ~17 minutes of event time), murmur2-partitioned;
every window closed by its partition's stream time must be written once with its count.

    .venv/bin/python bench/tumbling.py [--records N]
"""

from __future__ import annotations

import struct
import sys
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common as C
from bench import harness as H
from bench import stateless
from bench.stateless import loop  # noqa: F401 - the ceiling: the stateless loop

WINDOW_MS = 60_000


def brook(cfg: dict[str, Any]) -> tuple[Any, dict[str, str]]:
    from streaming import Serdes, StreamsBuilder, Suppressed, TimeWindows

    builder = StreamsBuilder()
    (builder.stream(cfg["topics"][0], key_serde=Serdes.String(), value_serde=Serdes.Json()).group_by_key()
     .windowed_by(TimeWindows.of(WINDOW_MS, grace=0)).count(materialized="counts")
     .suppress(Suppressed.until_window_closes()).to_stream().to(cfg["out"], value_serde=Serdes.Long()))
    return builder.build(), {}


def verify(bootstrap: str, records: int) -> Any:
    from streaming.runtime.partitioning import partition_for_key

    counts: Counter[tuple[str, int]] = Counter()
    stream_time = [0] * H.PARTITIONS
    for n in range(records):
        key, ts = C.key_of(n), C.value_of(n)["ts"]
        stream_time[partition_for_key(key.encode(), H.PARTITIONS)] = ts
        counts[(key, ts - ts % WINDOW_MS)] += 1
    finals = {w: c for w, c in counts.items()
              if w[1] + WINDOW_MS <= stream_time[partition_for_key(w[0].encode(), H.PARTITIONS)]}

    def check(cfg: dict[str, Any]) -> str | None:
        out: dict[tuple[str, int], int] = {}
        for m in C.iter_topic(bootstrap, cfg["out"], H.PARTITIONS):
            raw = m.key()
            window = (raw[:-8].decode(), struct.unpack(">q", raw[-8:])[0])
            if window in out:
                return f"window {window} written twice"
            out[window] = struct.unpack(">q", m.value())[0]
        differ = sum(out.get(w) != c for w, c in finals.items())
        return None if out == finals else f"{len(out):,} finals, {len(finals):,} expected, {differ:,} differ"
    return check


def main(argv: list[str] | None = None) -> int:
    with H.Run("tumbling", "1-minute tumbling count, finals only", argv) as run:
        source = run.topic("in")
        ends = {source: H.load(run.bootstrap, source, H.orders(run.args.records), partition=True)}
        checks = {"loop": stateless.verify(run.bootstrap, run.args.records), "brook": verify(run.bootstrap,
                                                                                             run.args.records)}
        for _ in run.rounds():
            for label in ("loop", "brook"):
                run.side(label, label, run.cfg(label, topics=[source], out=run.topic(f"out-{label}"), ends=ends),
                         run.args.records, verify=checks[label])
        run.versus("stateless loop", "brook", "loop", 0.4)
        return run.finish()


if __name__ == "__main__":
    sys.exit(main())
