"""An app for the scaling tests: clicks and views keyed by user (one co-partition group), a count per user (a
key-value store), a count per user and minute (a window store) and clicks joined with the views of the same user
within 10 minutes (a stream-stream join's two window-store buffers).

Topics from the environment: ``SCALE_CLICKS``, ``SCALE_VIEWS`` (inputs), ``SCALE_COUNTS``, ``SCALE_JOINED`` (outputs).
"""

from __future__ import annotations

import os

from streaming import JoinWindows, Materialized, Serdes, StreamsBuilder, TimeWindows, Topology

STRING, LONG = Serdes.String(), Serdes.Long()
JOIN_WINDOW_MS = 600_000


def topology() -> Topology:
    builder = StreamsBuilder()
    clicks = builder.stream(os.environ["SCALE_CLICKS"], key_serde=STRING, value_serde=STRING)
    views = builder.stream(os.environ["SCALE_VIEWS"], key_serde=STRING, value_serde=STRING)
    grouped = clicks.group_by_key()
    grouped.count(Materialized.as_("counts")).to_stream().to(os.environ["SCALE_COUNTS"], key_serde=STRING,
                                                             value_serde=LONG)
    grouped.windowed_by(TimeWindows.of(60_000)).count(Materialized.as_("per-minute"))
    clicks.join(views, lambda click, view: f"{click}|{view}", JoinWindows.of(JOIN_WINDOW_MS), store_name="seen") \
        .to(os.environ["SCALE_JOINED"], key_serde=STRING, value_serde=STRING)
    return builder.build()
