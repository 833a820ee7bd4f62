"""The app of ``bench/scaling.py``: two key-value stores over the input's keys, a count per key (``counts``) and the
last value per key (``last``). Its input topic comes from ``SCALE_BENCH_INPUT`` (it has no output topic: the state
is what a scaling moves).
"""

from __future__ import annotations

import os

from streaming import Materialized, Serdes, StreamsBuilder, Topology

STRING = Serdes.String()


def topology() -> Topology:
    builder = StreamsBuilder()
    grouped = builder.stream(os.environ["SCALE_BENCH_INPUT"], key_serde=STRING, value_serde=STRING).group_by_key()
    grouped.count(Materialized.as_("counts"))
    grouped.reduce(lambda _old, new: new, Materialized.as_("last"))
    return builder.build()
