"""The reset plan: what a reset will do, made by a dry run, shown as a table and kept as JSON.

:func:`make_plan` looks at the cluster and decides, per topic (:mod:`streaming.reset.topics`) and partition, where
the application's committed offsets go (:mod:`streaming.reset.positions`); which internal topics are deleted and
re-created (with their partition counts and configs); the reset epoch before and after
(:mod:`streaming.runtime.reset_epoch`: every worker wipes local state of an older epoch when it starts); and which
snapshots are retired. It records what it saw of the cluster (:class:`Observation`: the group's committed offsets,
the first and end offset of every partition involved, the topics' partition counts and ids, the current epoch and
the snapshots) and a fingerprint of it: ``--execute --plan FILE`` (:mod:`streaming.reset.execute`) observes the
same again and refuses, naming what changed, when anything did.

A plan refuses (:class:`~streaming.reset.errors.ResetError`, one line, nothing changed) a time in the future, an
input that is also an internal topic, and (:class:`~streaming.runtime.membership.LiveWorkersError`) any live
instance of the application, as Kafka's tool refuses a group with members, in the dry run too.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from streaming.naming import epoch_topic
from streaming.reset.cluster import Observation, observe
from streaming.reset.errors import ResetError
from streaming.reset.positions import ResetPosition, clamp, first_offset_at_or_after
from streaming.reset.topics import AppTopics, classify_topics
from streaming.runtime.cluster import cluster_metadata
from streaming.runtime.membership import STALE_AFTER_S, refuse_while_alive
from streaming.runtime.reset_epoch import next_epoch
from streaming.topology.topology import Topology

__all__ = ["PLAN_VERSION", "OffsetChange", "ResetPlan", "SnapshotRetirement", "TopicRecreation", "logged_stores",
           "make_plan"]

PLAN_VERSION = 1


@dataclass(frozen=True)
class OffsetChange:
    """One partition's committed offset before (None: never committed) and after the reset, with the partition's
    first and end offset when the plan was made, and why it goes there."""

    topic: str
    partition: int
    role: str
    """``input``, ``table``, ``intermediate`` or ``internal`` (a re-created topic the app reads)."""
    before: int | None
    after: int
    earliest: int
    end: int
    note: str = ""


@dataclass(frozen=True)
class TopicRecreation:
    """An internal topic deleted (when it exists) and re-created empty."""

    topic: str
    kind: str
    partitions: int
    configs: dict[str, str]
    exists: bool


@dataclass(frozen=True)
class SnapshotRetirement:
    """A snapshot of a store that the reset retires (moves to ``retired/<epoch>/``)."""

    store: str
    snapshot_id: str
    epoch: str


@dataclass(frozen=True)
class ResetPlan:
    """A reset, decided (module doc). Serialized with :meth:`to_json`; :meth:`table` is its terminal form."""

    application_id: str
    position: ResetPosition
    time_ms: int | None
    tables: str
    offsets: tuple[OffsetChange, ...]
    recreate: tuple[TopicRecreation, ...]
    epoch_before: str
    epoch_after: str
    snapshots: tuple[SnapshotRetirement, ...]
    snapshot_location: str | None
    observed: Observation
    created_at: str
    application: str | None = None
    """The app's name in the platform spec, when the plan was made from it."""
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def fingerprint(self) -> str:
        """A hash of the whole plan: what it saw of the cluster and what it decided (a plan changed after the dry
        run is refused)."""
        canonical = json.dumps(self._body(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:32]

    def to_json(self) -> str:
        """The plan file: the plan, what it observed, and its fingerprint (read back by :meth:`from_json`)."""
        return json.dumps({**self._body(), "fingerprint": self.fingerprint}, indent=2) + "\n"

    def _body(self) -> dict[str, Any]:
        return {"version": PLAN_VERSION, "application": self.application, "application_id": self.application_id,
                "created_at": self.created_at, "position": self.position.to_json(), "time_ms": self.time_ms,
                "tables": self.tables, "offsets": [asdict(o) for o in self.offsets],
                "recreate": [asdict(t) for t in self.recreate],
                "epoch": {"before": self.epoch_before, "after": self.epoch_after},
                "snapshots": {"location": self.snapshot_location, "retire": [asdict(s) for s in self.snapshots]},
                "notes": list(self.notes), "observed": asdict(self.observed)}

    @classmethod
    def from_json(cls, text: str, where: str) -> ResetPlan:
        """Read a plan written by :meth:`to_json`. Raises :class:`ResetError` naming ``where`` when it is not one,
        or was edited (its fingerprint does not match what it observed)."""
        try:
            raw = json.loads(text)
            if raw.get("version") != PLAN_VERSION:
                raise ValueError(f"version {raw.get('version')!r} is not {PLAN_VERSION}")
            observed = Observation(**raw["observed"])
            plan = cls(application_id=str(raw["application_id"]), position=ResetPosition.from_json(raw["position"]),
                       time_ms=raw["time_ms"], tables=str(raw["tables"]),
                       offsets=tuple(OffsetChange(**o) for o in raw["offsets"]),
                       recreate=tuple(TopicRecreation(**t) for t in raw["recreate"]),
                       epoch_before=str(raw["epoch"]["before"]), epoch_after=str(raw["epoch"]["after"]),
                       snapshots=tuple(SnapshotRetirement(**s) for s in raw["snapshots"]["retire"]),
                       snapshot_location=raw["snapshots"]["location"], observed=observed,
                       created_at=str(raw["created_at"]), application=raw.get("application"),
                       notes=tuple(raw.get("notes", [])))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ResetError(f"{where} is not a reset plan: {type(exc).__name__}: {exc}") from None
        if raw.get("fingerprint") != plan.fingerprint:
            raise ResetError(f"{where} was changed after the dry run wrote it (its fingerprint does not match its "
                             f"content): make a new plan with a dry run")
        return plan

    def table(self) -> str:
        """The plan for a terminal: offsets before -> after, topics re-created, the epoch, snapshots retired."""
        name = self.application_id if self.application in (None, self.application_id) else \
            f"{self.application} (application.id {self.application_id})"
        when = "" if self.time_ms is None else \
            f" (= {datetime.fromtimestamp(self.time_ms / 1000, UTC).isoformat(timespec='milliseconds')})"
        tables = "earliest" if self.tables == "earliest" else "the same position"
        lines = [f"reset of {name} {self.position.describe()}{when}, tables to {tables}"]
        rows = [(f"{o.topic}[{o.partition}]", o.role, "-" if o.before is None else str(o.before), str(o.after),
                 f"{o.earliest}..{o.end}", o.note) for o in self.offsets]
        header = ("partition", "role", "before", "after", "first..end", "")
        widths = [max(len(row[i]) for row in [header, *rows]) for i in range(5)]
        for row in [header, *rows]:
            lines.append(f"  {row[0]:<{widths[0]}}  {row[1]:<{widths[1]}}  {row[2]:>{widths[2]}} -> "
                         f"{row[3]:>{widths[3]}}  {row[4]:<{widths[4]}}  {row[5]}".rstrip())
        if self.recreate:
            lines.append("topics deleted and re-created empty:")
            lines.extend(f"  {t.topic} ({t.kind}, {t.partitions} partition(s)"
                         f"{'' if t.exists else ', does not exist yet: created'})" for t in self.recreate)
        else:
            lines.append("topics deleted: none")
        lines.append(f"reset epoch {self.epoch_before} -> {self.epoch_after}: every worker wipes its local state of "
                     f"epoch {self.epoch_before} when it starts")
        if self.snapshots:
            lines.append(f"snapshots retired (moved to retired/<epoch>/ under {self.snapshot_location}/"
                         f"{self.application_id}/<store>):")
            lines.extend(f"  {s.store} {s.snapshot_id} (epoch {s.epoch})" for s in self.snapshots)
        else:
            lines.append("snapshots retired: none" + ("" if self.snapshot_location else " (no snapshot location)"))
        lines.extend(self.notes)
        return "\n".join(lines)


def logged_stores(topology: Topology) -> list[str]:
    """The stores of ``topology`` with a changelog: the ones with snapshots."""
    return sorted(name for name, builder in topology.store_builders.items() if builder.logging_enabled)


# -- deciding ----------------------------------------------------------------------------------------------
def make_plan(topology: Topology, application_id: str, client_config: Mapping[str, Any], position: ResetPosition, *,
              tables: str = "earliest", dead_letters: bool = False, only_internal: Iterable[str] | None = None,
              snapshot_location: str | None = None, application: str | None = None, now_ms: int | None = None,
              stale_after_s: float = STALE_AFTER_S) -> ResetPlan:
    """The plan of resetting ``application_id`` (running ``topology``) to ``position`` (module doc).

    ``tables``: ``earliest`` (default) or ``same`` (the position of the streams). ``dead_letters``: also delete
    and re-create the dead-letter topic and its replay ledger. ``only_internal``: delete only these internal
    topics. ``snapshot_location``: where the platform's compaction writes the stores' snapshots.

    Raises:
        ResetError: bad input or an unreadable cluster (names it); LiveWorkersError: an instance is alive.
    """
    if tables not in ("earliest", "same"):
        raise ResetError(f"tables must be 'earliest' or 'same', got {tables!r}")
    now = int(time.time() * 1000) if now_ms is None else now_ms
    time_ms = position.time_ms(now)
    config = dict(client_config)
    topology = topology.bind(application_id, topology.generations)  # a bound topology keeps its generations
    metadata = cluster_metadata(config).topics
    counts = {name: len(t.partitions) for name, t in metadata.items() if t.error is None}
    roles = classify_topics(topology, application_id, counts, dead_letters=dead_letters, only_internal=only_internal)
    refuse_while_alive(config, application_id, f"reset application {application_id!r}", stale_after_s=stale_after_s)
    stores = logged_stores(topology)
    involved = [*roles.inputs, *roles.tables, *roles.intermediates, *(t.name for t in roles.internal),
                epoch_topic(application_id)]
    observed = observe(config, application_id, involved, snapshot_location, stores)
    offsets = _offset_changes(config, roles, observed, position, time_ms, tables)
    recreate = tuple(TopicRecreation(t.name, t.kind, t.partitions, dict(t.configs),
                                     observed.topics[t.name]["partitions"] > 0) for t in roles.internal)
    # Every snapshot goes: one made under the old epoch is never loaded again, nor continued by compaction.
    retire = tuple(SnapshotRetirement(store, *entry.split("@", 1))
                   for store, entries in observed.snapshots.items() for entry in entries)
    notes = []
    if roles.global_tables:
        notes.append(f"global table topics {list(roles.global_tables)}: read whole by every instance at start, "
                     f"nothing to reset")
    if roles.outputs:
        notes.append(f"output topics {list(roles.outputs)}: untouched (a reprocessing appends to them)")
    if topology.dynamic_sinks:
        notes.append(f"sinks {topology.dynamic_sinks} choose their output topics per record: those are untouched too "
                     f"(a dynamic sink never writes an input or internal topic)")
    return ResetPlan(application_id=application_id, position=position, time_ms=time_ms, tables=tables,
                     offsets=offsets, recreate=recreate, epoch_before=observed.epoch,
                     epoch_after=next_epoch(observed.epoch), snapshots=retire, snapshot_location=snapshot_location,
                     observed=observed, created_at=datetime.fromtimestamp(now / 1000, UTC).isoformat(
                         timespec="milliseconds").replace("+00:00", "Z"), application=application, notes=tuple(notes))


def _offset_changes(config: dict[str, Any], roles: AppTopics, observed: Observation, position: ResetPosition,
                    time_ms: int | None, tables: str) -> tuple[OffsetChange, ...]:
    changes = []

    def partitions(topic: str) -> Iterable[tuple[int, int, int, int | None]]:
        shape = observed.topics[topic]
        for p in range(shape["partitions"]):
            yield p, shape["earliest"][p], shape["end"][p], observed.committed.get(f"{topic}[{p}]")

    for role, topic_names in (("input", roles.inputs), ("table", roles.tables)):
        chosen = ResetPosition("earliest") if role == "table" and tables == "earliest" else position
        chosen_time = None if chosen.kind == "earliest" else time_ms
        for topic in topic_names:
            for p, earliest, end, before in partitions(topic):
                after, note = _position_of(config, topic, p, earliest, end, chosen, chosen_time)
                changes.append(OffsetChange(topic, p, role, before, after, earliest, end, note))
    for topic in roles.intermediates:
        for p, earliest, end, before in partitions(topic):
            changes.append(OffsetChange(topic, p, "intermediate", before, end, earliest, end, "its end"))
    recreated = {t.name: t.partitions for t in roles.internal}
    for topic in roles.internal_sources:  # re-created with the partition count the runtime gives it now
        shape = observed.topics[topic]
        for p in range(recreated[topic]):
            old = p < shape["partitions"]
            changes.append(OffsetChange(topic, p, "internal", observed.committed.get(f"{topic}[{p}]"), 0,
                                        shape["earliest"][p] if old else 0, shape["end"][p] if old else 0,
                                        "re-created empty"))
    return tuple(changes)


def _position_of(config: dict[str, Any], topic: str, partition: int, earliest: int, end: int,
                 position: ResetPosition, time_ms: int | None) -> tuple[int, str]:
    if position.kind == "earliest":
        return earliest, "earliest"
    if position.kind == "offset":
        wanted = int(position.value or 0)
        after = clamp(wanted, earliest, end)
        return after, "" if after == wanted else f"clamped from {wanted}"
    assert time_ms is not None
    after, read = first_offset_at_or_after(config, topic, partition, earliest, end, time_ms)
    return after, f"first record at or after the time ({read} read)" if after < end else \
        f"nothing at or after the time: its end ({read} read)"
