"""The state a day's batch run hands the next, on disk: never read by live workers.

::

    <root>/<app>/_state/days/<YYYY-MM-DD>.json          what the day's run left (written last, atomically):
        frontier, where each input partition stopped, the next batch offset of every partition the app
        writes, each task's stream, partition and node times and punctuation schedules
        (``streaming.batch.TaskState``), the snapshot id of its stores
    <root>/<app>/_state/snapshots/<application.id>/<store>/   the stores, in the layout of changelog snapshots
        (``streaming.state.snapshots``): data/<YYYYMMDD>/partition=<task partition>/..., manifests/<YYYYMMDD>.json

A snapshot's identity says ``generation: batch``, so nothing that restores live state takes it for a changelog's
snapshot (and its ``next_offset`` is 0: it covers no changelog offset). A day's state exists once its JSON file
does; the day after starts from it (:func:`previous_state`). Reprocessing a day again replaces its state, which
leaves the states of the days after it made from the old one: they are named, and must be reprocessed again.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from streaming.batch import TaskState

__all__ = ["BATCH_GENERATION", "DayRecord", "ReprocessStateError", "day_states", "forget_day_state", "previous_state",
           "snapshot_id", "snapshots_location", "write_day_state"]

#: The store identity's generation of every batch snapshot (live ones have ``none`` or a topic generation).
BATCH_GENERATION = "batch"

TopicPartition = tuple[str, int]


class ReprocessStateError(ValueError):
    """A day's state is missing or unreadable (the message names the day and the file)."""


@dataclass
class DayRecord:
    """What ``<day>.json`` holds."""

    day: date
    frontier: int
    stops: dict[TopicPartition, int]
    next_offsets: dict[TopicPartition, int]
    tasks: dict[str, TaskState]
    snapshot_id: str
    stores: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"version": 1, "day": self.day.isoformat(), "frontier": self.frontier,
                "stops": _tps_to_json(self.stops), "next_offsets": _tps_to_json(self.next_offsets),
                "tasks": {task: state.to_json() for task, state in sorted(self.tasks.items())},
                "snapshot_id": self.snapshot_id, "stores": sorted(self.stores)}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> DayRecord:
        return cls(day=date.fromisoformat(raw["day"]), frontier=int(raw["frontier"]), stops=_tps(raw["stops"]),
                   next_offsets=_tps(raw["next_offsets"]),
                   tasks={task: TaskState.from_json(state) for task, state in raw["tasks"].items()},
                   snapshot_id=str(raw["snapshot_id"]), stores=list(raw["stores"]))


def _tps_to_json(values: dict[TopicPartition, int]) -> dict[str, dict[str, int]]:
    nested: dict[str, dict[str, int]] = {}
    for (topic, partition), value in sorted(values.items()):
        nested.setdefault(topic, {})[str(partition)] = value
    return nested


def _tps(nested: dict[str, dict[str, int]]) -> dict[TopicPartition, int]:
    return {(topic, int(p)): int(v) for topic, values in nested.items() for p, v in values.items()}


def _days_dir(root: Path, app: str) -> Path:
    return root / app / "_state" / "days"


def snapshots_location(root: Path, app: str) -> str:
    """Where the batch's store snapshots of ``app`` live (a ``streaming.state.snapshots`` location)."""
    return str(root / app / "_state" / "snapshots")


def snapshot_id(day: date) -> str:
    """The id of a day's store snapshots: ``YYYYMMDD`` (ids sort by day, as snapshot ids sort by age)."""
    return day.strftime("%Y%m%d")


def day_states(root: Path, app: str) -> list[date]:
    """The days whose state exists, oldest first."""
    directory = _days_dir(root, app)
    if not directory.is_dir():
        return []
    return sorted(date.fromisoformat(path.stem) for path in directory.glob("*.json"))


def previous_state(root: Path, app: str, day: date) -> DayRecord | None:
    """The state ``day``'s run starts from: the day before's; None when no earlier day was reprocessed (the first
    day starts from empty state).

    Raises:
        ReprocessStateError: an earlier day was reprocessed but not the day before (days run in order), or its
            state cannot be read.
    """
    before = day - timedelta(days=1)
    path = _days_dir(root, app) / f"{before.isoformat()}.json"
    if not path.is_file():
        earlier = [d for d in day_states(root, app) if d < day]
        if earlier:
            raise ReprocessStateError(
                f"day {day} of app {app!r} cannot be reprocessed: it goes on from the state of {before}, which was "
                f"not reprocessed (the last day before it that was: {earlier[-1]}): reprocess the days in order, "
                f"from {earlier[-1] + timedelta(days=1)} (a backfill does)")
        return None
    try:
        return DayRecord.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ReprocessStateError(f"the batch state of app {app!r} for {before} ({path}) cannot be read: {exc}; "
                                  f"reprocess {before} again") from exc


def write_day_state(root: Path, app: str, record: DayRecord) -> Path:
    """Publish a day's state: its JSON file, written aside and renamed into place (after the store snapshots)."""
    directory = _days_dir(root, app)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{record.day.isoformat()}.json"
    tmp = directory / f".{path.name}.{uuid.uuid4().hex[:8]}.tmp"
    tmp.write_text(json.dumps(record.to_json(), indent=2) + "\n")
    os.replace(tmp, path)
    return path


def forget_day_state(root: Path, app: str, day: date) -> None:
    """Remove a day's state before its run writes it again: until the new one is published, the day after has none
    to start from (never a mix of the old and the new)."""
    (_days_dir(root, app) / f"{day.isoformat()}.json").unlink(missing_ok=True)
