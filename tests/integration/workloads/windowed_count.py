"""A windowed count for stream-time tests: counts records per key in tumbling windows of :data:`SIZE` ms
with :data:`GRACE` ms grace, from one topic or several (``WCOUNT_INPUTS``, comma-separated: a task of
several partitions), writes every count update to ``WCOUNT_OUTPUT`` and each record that arrives after its
window closed to ``WCOUNT_LATE``. Records valued ``skip`` are filtered out before the count: they move the task's
stream time, not the count's."""

from __future__ import annotations

import os

from streaming import Materialized, Serdes, StreamsBuilder, TimeWindows, Topology, WindowedSerdes

SIZE, GRACE = 1_000, 500
STORE = "wcounts"
String, Long = Serdes.String(), Serdes.Long()
WINDOWED = WindowedSerdes.time_windowed(String, SIZE)


def topology() -> Topology:
    builder = StreamsBuilder()
    (builder.stream(os.environ["WCOUNT_INPUTS"].split(","), key_serde=String, value_serde=String)
     .filter(lambda key, value: value != "skip")
     .group_by_key()
     .windowed_by(TimeWindows.of(SIZE, grace=GRACE), late_records_topic=os.environ["WCOUNT_LATE"])
     .count(Materialized.as_(STORE).with_retention(10**9))
     .to_stream().to(os.environ["WCOUNT_OUTPUT"], key_serde=WINDOWED, value_serde=Long))
    return builder.build()
