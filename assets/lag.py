"""An app's consumer lag, and the partition count its measured rates call for (what the lag sensor plans from).

A :class:`LagSample` is the group's committed offset and the exact end (:func:`streaming.admin.watermarks`; the
embedded broker's ListOffsets "latest" is wrong) of every input partition, at one moment. Two samples give the
input rate (ends advancing) and the processing rate (committed offsets advancing). While the group lags, its
workers have a backlog, so the processing rate is their capacity: per partition, ``processing / partitions``
(Brook runs a task per input partition, and a partition is the unit a worker takes). The count that keeps up
with the input and drains the backlog within ``drain_minutes``, with ``headroom``, is
``ceil(headroom * (input_rate + lag / drain_s) / per_partition_rate)``, at least one more than now and at most
``max_partitions`` (:func:`partitions_needed`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from streaming.admin import committed_offsets, partition_counts, watermarks

__all__ = ["LagSample", "ScalingAdvice", "partitions_needed", "sample_lag"]


@dataclass(frozen=True)
class LagSample:
    """Committed offset and end per input partition (``"topic[p]"``) of one group, at ``at`` (epoch seconds)."""

    at: float
    committed: dict[str, int] = field(default_factory=dict)
    ends: dict[str, int] = field(default_factory=dict)

    @property
    def lag(self) -> int:
        """Records not processed yet, over every partition (a partition with no commit lags from offset 0)."""
        return sum(max(end - self.committed.get(name, 0), 0) for name, end in self.ends.items())

    def to_json(self) -> dict[str, Any]:
        return {"at": self.at, "committed": self.committed, "ends": self.ends}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> LagSample:
        return cls(at=float(raw["at"]), committed={k: int(v) for k, v in raw["committed"].items()},
                   ends={k: int(v) for k, v in raw["ends"].items()})


def sample_lag(bootstrap_servers: str, group: str, topics: Iterable[str], *,
               client_config: Mapping[str, Any] | None = None, at: float | None = None) -> LagSample:
    """The lag of consumer group ``group`` on every partition of ``topics``, now (or stamped ``at``)."""
    topics = list(topics)
    counts = partition_counts(bootstrap_servers, topics, client_config=client_config)
    partitions = [(topic, p) for topic in topics for p in range(counts.get(topic) or 0)]
    ends = watermarks(bootstrap_servers, partitions, client_config=client_config)
    committed = committed_offsets(bootstrap_servers, group, client_config=client_config)
    return LagSample(at=time.time() if at is None else at,
                     committed={f"{t}[{p}]": committed[(t, p)] for t, p in partitions if (t, p) in committed},
                     ends={f"{t}[{p}]": ends[(t, p)][1] for t, p in partitions})


@dataclass(frozen=True)
class ScalingAdvice:
    """How many partitions the measured rates call for, and from what."""

    current: int
    partitions: int
    lag: int
    input_rate: float
    processing_rate: float

    @property
    def per_partition_rate(self) -> float:
        return self.processing_rate / self.current

    def describe(self) -> str:
        return (f"lag {self.lag:,} records; input {self.input_rate:,.0f} records/s, processed "
                f"{self.processing_rate:,.0f} records/s on {self.current} partitions "
                f"({self.per_partition_rate:,.0f}/s each): {self.partitions} partitions")


def partitions_needed(previous: LagSample, current: LagSample, partitions: int, *, headroom: float,
                      drain_minutes: float, max_partitions: int) -> ScalingAdvice | None:
    """The advice from two samples of a group reading ``partitions`` partitions per input topic (see the module
    doc); None when nothing was processed between them (the workers are stopped or stuck: more partitions would
    not help, and there is no rate to size from)."""
    elapsed = current.at - previous.at
    if elapsed <= 0:
        raise ValueError(f"lag samples out of order: {previous.at} then {current.at}")
    processed = sum(max(offset - previous.committed.get(name, 0), 0) for name, offset in current.committed.items())
    arrived = sum(max(end - previous.ends.get(name, end), 0) for name, end in current.ends.items())
    if processed <= 0:
        return None
    processing_rate, input_rate = processed / elapsed, arrived / elapsed
    wanted = headroom * (input_rate + current.lag / (drain_minutes * 60))
    needed = math.ceil(wanted / (processing_rate / partitions))
    return ScalingAdvice(current=partitions, partitions=min(max(needed, partitions + 1), max_partitions),
                         lag=current.lag, input_rate=input_rate, processing_rate=processing_rate)
