"""The scaling plan: what taking a co-partition group from M to N partitions will do, made by a dry run, shown as a
table and kept as JSON.

:func:`make_plan` checks the request and the cluster (each refusal is one :class:`ScalingError` line, and nothing
is changed), then lists every topic of the group (:mod:`streaming.scaling.groups`) with its current and new
partition count and physical name, the records to copy and re-shard, the work in order (:class:`Stage`) and the
expected downtime. It records what it saw of the cluster (the reset's :class:`~streaming.reset.cluster.
Observation`: committed offsets, first and end offsets read to partition EOF, topic ids, the reset epoch, the
snapshots) and a fingerprint of it, so the job that executes the plan can refuse a cluster that changed since.

Modes:

- ``migrate`` (works on every broker; the only one on the embedded broker): the group moves to a new topic
  generation (:func:`streaming.naming.generation_name`: generation 1 is the logical name, ``n`` > 1 is
  ``<logical>.v<n>``) with N partitions. Spark copies the records of the inputs, intermediate and repartition
  topics, re-partitioned by murmur2 on the serialized key, each key's records in their order with their
  timestamps and headers; re-shards every store's changelog by the record key of its layout
  (:mod:`streaming.scaling.store_keys`; a Processor API store by the placement chosen for it, the plan notes each)
  and writes a snapshot per new partition; writes the new tasks' stream time (:mod:`streaming.scaling.stream_time`);
  verifies; then the group's offsets are committed at the copied ends and the platform spec names the new
  generation. Scaling down works the same way.
- ``in_place`` (CreatePartitions, Kafka only; grows only): :mod:`streaming.scaling.in_place`.

Refusals (module :class:`ScalingError`, one line each): a partition count under 1 or equal to the group's; a mode
that is neither; a request naming only part of a co-partition group, or topics of several; a group whose topics
have different counts (any N would leave it split); a missing input; a new generation's topic that already exists;
a placement for a store not in the group, or an unknown placement; a topic of the group written with a custom
partitioner;
``in_place`` that would remove partitions, or on a broker without CreatePartitions (naming the broker; ``migrate``
works there). And, as a reset, any live instance of the application
(:func:`streaming.runtime.membership.refuse_while_alive`, :class:`~streaming.runtime.membership.LiveWorkersError`),
in the dry run too.

The downtime estimate is ``FIXED_DOWNTIME_S`` plus the records to copy over ``COPY_RECORDS_PER_S`` plus the
changelog records over ``RESHARD_RECORDS_PER_S`` (in place: only the records of keys that move): rates chosen for
Spark ``local[*]`` on 2 cores reading through the Python Kafka data source (DESIGN.md: a SparkSession takes 6-15 s
to start), to be replaced by ``bench/scaling.py``'s measurement.
"""

from __future__ import annotations

import hashlib
import io
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.table import Table

from streaming.naming import generation_name
from streaming.reset.cluster import Observation, observe
from streaming.reset.errors import ResetError
from streaming.runtime.cluster import cluster_metadata
from streaming.runtime.membership import STALE_AFTER_S, LiveWorkersError, refuse_while_alive
from streaming.scaling.cluster import create_partitions_refusal
from streaming.scaling.errors import ScalingError
from streaming.scaling.groups import (
    GroupTopic,
    ScalingGroup,
    custom_partitioned,
    left_subscription_stores,
    scaling_groups,
)
from streaming.scaling.in_place import InPlacePlan, in_place_plan
from streaming.scaling.store_keys import Placement, store_layouts
from streaming.topology.topology import Topology

__all__ = ["COPY_RECORDS_PER_S", "FIXED_DOWNTIME_S", "MODES", "PLAN_VERSION", "RESHARD_RECORDS_PER_S",
           "ScalingPlan", "Stage", "StoreScaling", "TopicScaling", "check_counts", "choose_group", "make_plan"]

PLAN_VERSION = 1
MODES = ("migrate", "in_place")
COPY_RECORDS_PER_S = 40_000
RESHARD_RECORDS_PER_S = 40_000
FIXED_DOWNTIME_S = 30.0
_READ_ROLES = ("input", "intermediate", "repartition")


@dataclass(frozen=True)
class TopicScaling:
    """One topic of the group: logical name, role, current and new physical name, generation and partition count
    (0: it does not exist yet, the runtime has not created it), per current partition its first and end offset and
    the group's committed offset (None: none committed; topics the app does not read have none), its store (a
    changelog) and sub-topology."""

    topic: str
    role: str
    physical: str
    generation: int
    new_physical: str
    new_generation: int
    partitions: int
    new_partitions: int
    earliest: list[int]
    end: list[int]
    committed: list[int | None]
    store: str | None = None
    subtopology: int | None = None
    """The sub-topology that reads the topic or owns it (None: a topic only a join ties to the group)."""

    @property
    def records(self) -> int:
        """The records the topic holds (what a migration copies or re-shards)."""
        return sum(e - s for s, e in zip(self.earliest, self.end, strict=True))

    @property
    def undrained(self) -> int:
        """Records of a topic the app reads that its group has not committed past (what the drain waits for)."""
        if self.role not in _READ_ROLES:
            return 0
        return sum(e - (s if c is None else c) for s, e, c in zip(self.earliest, self.end, self.committed,
                                                                  strict=True))


@dataclass(frozen=True)
class StoreScaling:
    """A store re-sharded with the group: its changelog (logical), the layout of its keys, the changelog's records,
    where its entries go (:class:`~streaming.scaling.store_keys.Placement`) and the Processor API processors that
    write it (whose keys are assumed to be record keys unless the placement says otherwise)."""

    store: str
    kind: str
    changelog: str
    subtopology: int
    records: int
    placement: str = Placement.BY_KEY.value
    processor_api: list[str] = field(default_factory=list)
    note: str = ""


@dataclass(frozen=True)
class Stage:
    """One step of the work, in order: ``by`` ``spark`` or ``admin`` (a Kafka admin call), the records it reads."""

    name: str
    by: str
    what: str
    records: int = 0


@dataclass(frozen=True)
class ScalingPlan:
    """A scaling, decided (module doc). Serialized with :meth:`to_json`; :meth:`table` is its terminal form."""

    application_id: str
    group: str
    joins: list[str]
    mode: str
    partitions: int
    new_partitions: int
    topics: list[TopicScaling]
    stores: list[StoreScaling]
    stages: list[Stage]
    rewrites: list[str]
    """Foreign-key subscription stores whose values name a left partition of this group: rewritten."""
    downtime_s: float
    observed: Observation
    created_at: str
    in_place: InPlacePlan | None = None
    application: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def records_to_copy(self) -> int:
        """Records of the inputs, intermediate and repartition topics a migration copies (0 in place)."""
        return 0 if self.mode == "in_place" else sum(t.records for t in self.topics if t.role in _READ_ROLES)

    @property
    def records_to_reshard(self) -> int:
        """Changelog records read to re-shard the stores (a dropped store's are not read)."""
        return sum(s.records for s in self.stores if s.placement != Placement.DROP)

    @property
    def fingerprint(self) -> str:
        """A hash of the whole plan: what it saw and what it decided."""
        return hashlib.sha256(json.dumps(self._body(), sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:32]

    def _body(self) -> dict[str, Any]:
        body = asdict(self)
        body["version"] = PLAN_VERSION
        body["records_to_copy"], body["records_to_reshard"] = self.records_to_copy, self.records_to_reshard
        body["rates"] = {"copy_records_per_s": COPY_RECORDS_PER_S, "reshard_records_per_s": RESHARD_RECORDS_PER_S,
                         "fixed_downtime_s": FIXED_DOWNTIME_S}
        return body

    def to_json(self) -> str:
        """The plan file: the plan, what it observed, and its fingerprint (read back by :meth:`from_json`)."""
        return json.dumps({**self._body(), "fingerprint": self.fingerprint}, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str, where: str) -> ScalingPlan:
        """Read a plan written by :meth:`to_json`; :class:`ScalingError` naming ``where`` when it is not one or was
        edited (its fingerprint does not match)."""
        try:
            raw = json.loads(text)
            if raw.get("version") != PLAN_VERSION:
                raise ValueError(f"version {raw.get('version')!r} is not {PLAN_VERSION}")
            in_place = raw["in_place"]
            plan = cls(
                application_id=raw["application_id"], group=raw["group"], joins=raw["joins"], mode=raw["mode"],
                partitions=raw["partitions"], new_partitions=raw["new_partitions"],
                topics=[TopicScaling(**t) for t in raw["topics"]], stores=[StoreScaling(**s) for s in raw["stores"]],
                stages=[Stage(**s) for s in raw["stages"]], rewrites=raw["rewrites"], downtime_s=raw["downtime_s"],
                observed=Observation(**raw["observed"]), created_at=raw["created_at"],
                in_place=None if in_place is None else InPlacePlan(**{
                    **in_place, "targets": {int(p): q for p, q in in_place["targets"].items()}}),
                application=raw["application"], notes=raw["notes"])
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ScalingError(f"{where} is not a scaling plan: {type(exc).__name__}: {exc}") from None
        if raw.get("fingerprint") != plan.fingerprint:
            raise ScalingError(f"{where} was changed after the dry run wrote it (its fingerprint does not match its "
                               f"content): make a new plan with a dry run")
        return plan

    def table(self, width: int = 140) -> str:
        """The plan for a terminal (rich tables): the topics, the stores, the stages, the downtime."""
        name = self.application_id if self.application in (None, self.application_id) else \
            f"{self.application} (application.id {self.application_id})"
        out = io.StringIO()
        console = Console(file=out, width=width, no_color=True, highlight=False)
        console.print(f"scaling of {name}, group {self.group!r}: {self.partitions} -> {self.new_partitions} "
                      f"partitions, mode {self.mode}" + (f" (joins: {'; '.join(self.joins)})" if self.joins else ""))
        topics = Table("topic", "role", "partitions", "physical", "records", "to drain")
        for t in self.topics:
            physical = t.physical if t.physical == t.new_physical else f"{t.physical} -> {t.new_physical}"
            topics.add_row(t.topic, t.role, f"{t.partitions} -> {t.new_partitions}", physical, str(t.records),
                           str(t.undrained) if t.role in _READ_ROLES else "")
        console.print(topics)
        if self.stores:
            stores = Table("store", "key layout", "placement", "changelog records", "")
            for s in self.stores:
                note = s.note or (f"Processor API: {', '.join(s.processor_api)}" if s.processor_api else "")
                stores.add_row(s.store, s.kind, s.placement, str(s.records), note)
            console.print(stores)
        stages = Table("#", "by", "stage", "records")
        for index, stage in enumerate(self.stages, 1):
            stages.add_row(str(index), stage.by, stage.what, str(stage.records) if stage.records else "")
        console.print(stages)
        console.print(f"records to copy {self.records_to_copy}, changelog records to re-shard "
                      f"{self.records_to_reshard}; expected downtime {self.downtime_s:.0f} s (estimate: "
                      f"{FIXED_DOWNTIME_S:.0f} s + copy at {COPY_RECORDS_PER_S}/s + re-shard at "
                      f"{RESHARD_RECORDS_PER_S}/s)")
        for note in self.notes:
            console.print(note)
        return out.getvalue().rstrip() + "\n"


# -- checking the request ----------------------------------------------------------------------------------------
def choose_group(groups: Sequence[ScalingGroup], topics: Sequence[str], application_id: str) -> ScalingGroup:
    """The co-partition group ``topics`` (logical names) name, or :class:`ScalingError`: no topic, a topic the app
    does not scale, topics of several groups, or only part of a group's inputs (``ScalingGroup.external``)."""
    if not topics:
        raise ScalingError(f"name the topics to scale: one co-partition group of application {application_id!r} "
                           f"({_list_groups(groups)})")
    by_topic = {t.topic: g for g in groups for t in g.topics}
    unknown = [t for t in topics if t not in by_topic]
    if unknown:
        raise ScalingError(f"topic {unknown[0]!r} is not one application {application_id!r} scales (its groups: "
                           f"{_list_groups(groups)})")
    chosen = list(dict.fromkeys(by_topic[t].name for t in topics))
    if len(chosen) > 1:
        raise ScalingError(f"topics {list(topics)} are in different co-partition groups ({', '.join(chosen)}): "
                           f"scale one group at a time")
    group = by_topic[topics[0]]
    missing = [t for t in group.external if t not in topics]
    if missing:
        why = f" ({'; '.join(group.joins)})" if group.joins else " (read by the same tasks)"
        raise ScalingError(f"scaling {list(topics)} alone would split co-partition group {group.name!r}{why}: "
                           f"{missing} must keep the same partition count; name the whole group: "
                           f"{', '.join(group.external)}")
    return group


def _list_groups(groups: Sequence[ScalingGroup]) -> str:
    return "; ".join(f"{g.name}: {', '.join(g.external)}" for g in groups) or "none"


def check_counts(group: ScalingGroup, physical: Mapping[str, str], counts: Mapping[str, int], partitions: int,
                 mode: str) -> int:
    """The group's current partition count (``counts``: physical topic -> count, absent when it does not exist),
    or :class:`ScalingError`: a missing input, topics of different counts, ``partitions`` equal to the count, or an
    ``in_place`` that would remove partitions."""
    missing = [t for t in group.names("input", "intermediate") if physical[t] not in counts]
    if missing:
        raise ScalingError(f"input topic {physical[missing[0]]!r} of co-partition group {group.name!r} does not "
                           f"exist on the cluster")
    existing = {physical[t]: counts[physical[t]] for t in group.names() if physical[t] in counts}
    if not existing:
        raise ScalingError(f"no topic of co-partition group {group.name!r} exists on the cluster yet: start the "
                           f"application once, or create its topics with the count wanted")
    if len(set(existing.values())) > 1:
        shown = ", ".join(f"{t}: {c}" for t, c in existing.items())
        raise ScalingError(f"co-partition group {group.name!r} is already split, its topics have different partition "
                           f"counts ({shown}): one count for the group cannot be applied; make them equal first")
    current = next(iter(existing.values()))
    if partitions == current:
        raise ScalingError(f"co-partition group {group.name!r} already has {current} partitions: nothing to scale")
    if mode == "in_place" and partitions < current:
        raise ScalingError(f"in_place cannot take group {group.name!r} from {current} to {partitions} partitions: "
                           f"Kafka cannot remove partitions; use mode 'migrate'")
    return current


def _check_arguments(partitions: Any, mode: str) -> None:
    if not isinstance(partitions, int) or isinstance(partitions, bool) or partitions < 1:
        raise ScalingError(f"the new partition count must be an integer of 1 or more, got {partitions!r}")
    if mode not in MODES:
        raise ScalingError(f"mode must be 'migrate' or 'in_place', got {mode!r}")


# -- deciding ------------------------------------------------------------------------------------------------------
def make_plan(topology: Topology, application_id: str, client_config: Mapping[str, Any], topics: Sequence[str],
              partitions: int, mode: str = "migrate", *, generations: Mapping[str, int] | None = None,
              placements: Mapping[str, str] | None = None, snapshot_location: str | None = None,
              application: str | None = None, now_ms: int | None = None,
              stale_after_s: float = STALE_AFTER_S, preview: bool = False) -> ScalingPlan:
    """The plan of taking the co-partition group that ``topics`` name (logical names) of ``application_id``
    (running ``topology``) to ``partitions`` partitions in ``mode`` (module doc). ``generations``: each logical
    topic's current generation (the platform spec's map; default 1). ``placements``: store -> ``by-key``
    (default), ``replicate`` or ``drop`` (:class:`~streaming.scaling.store_keys.Placement`: for Processor API stores
    whose keys are not record keys). ``snapshot_location``: where the platform's compaction writes snapshots.

    ``preview``: plan even while instances are alive (the lag sensor's dry run; the plan notes it, and executing
    it still refuses them).

    Raises:
        ScalingError: bad input, or the cluster is not as the plan needs it (one line; nothing changed).
        LiveWorkersError: an instance of the application is alive (unless ``preview``).
    """
    _check_arguments(partitions, mode)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    config = dict(client_config)
    topology = topology.bind(application_id)
    group = choose_group(scaling_groups(topology, application_id), topics, application_id)
    chosen = _placements(group, placements or {})
    partitioned = custom_partitioned(topology, group)
    if partitioned:
        topic, sink = partitioned[0]
        raise ScalingError(f"topic {topic!r} of co-partition group {group.name!r} is written by sink {sink!r} with its "
                           f"own partitioner: its readers' state follows that partitioner, which a re-shard by murmur2 "
                           f"cannot reproduce; scaling this group is not supported")
    current_generation = {t: (generations or {}).get(t, 1) for t in group.names()}
    physical = {t: generation_name(t, g) for t, g in current_generation.items()}
    new_generation = {t: g + 1 if mode == "migrate" else g for t, g in current_generation.items()}
    new_physical = {t: generation_name(t, g) for t, g in new_generation.items()}
    metadata = cluster_metadata(config).topics
    counts = {name: len(t.partitions) for name, t in metadata.items() if t.error is None and t.partitions}
    current = check_counts(group, physical, counts, partitions, mode)
    live_note = None
    try:
        refuse_while_alive(config, application_id, f"scale application {application_id!r}",
                           stale_after_s=stale_after_s)
    except LiveWorkersError as exc:
        if not preview:
            raise
        live_note = f"a preview made while workers run: {exc}; the records and offsets are those of that moment"
    if mode == "migrate":
        taken = [new_physical[t] for t in group.names() if new_physical[t] in counts]
        if taken:
            raise ScalingError(f"topic {taken[0]!r} of the new generation already exists (left by an earlier scaling?):"
                               f" delete it, or name the current generations so the plan goes past it")
    else:
        first = physical[group.external[0]]
        refusal = create_partitions_refusal(config, first, partitions)
        if refusal is not None:
            raise ScalingError(f"cannot scale in place on the broker at {config['bootstrap.servers']}: {refusal}; use "
                               f"mode 'migrate' (the group moves to a new topic generation)")
    layouts = store_layouts(topology)
    try:
        observed = observe(config, application_id, list(physical.values()), snapshot_location,
                           [t.store for t in group.topics if t.store])
    except ResetError as exc:
        raise ScalingError(str(exc)) from None
    scaled = [_topic_scaling(member, physical, new_physical, current_generation, new_generation, partitions, observed)
              for member in group.topics]
    stores = [StoreScaling(t.store, layouts[t.store].kind.value, t.topic, layouts[t.store].subtopology, t.records,
                           chosen.get(t.store, Placement.BY_KEY).value, list(layouts[t.store].processor_api),
                           layouts[t.store].note) for t in scaled if t.store is not None]
    rewrites = left_subscription_stores(topology, group)
    in_place = in_place_plan({t.physical: t.partitions for t in scaled},
                             [t.physical for t in scaled if t.role in _READ_ROLES], current, partitions) \
        if mode == "in_place" else None
    snapshot_count = sum(len(ids) for ids in observed.snapshots.values())
    stages = _stages(scaled, stores, rewrites, partitions, in_place, snapshot_count)
    reshard = sum(s.records for s in stores if s.placement != Placement.DROP)
    if in_place is None:
        copy = sum(t.records for t in scaled if t.role in _READ_ROLES)
        downtime = FIXED_DOWNTIME_S + copy / COPY_RECORDS_PER_S + reshard / RESHARD_RECORDS_PER_S
    else:
        downtime = FIXED_DOWNTIME_S + reshard * (1 - in_place.kept_fraction) / RESHARD_RECORDS_PER_S
    notes = _notes(scaled, stores, chosen, mode) + ([live_note] if live_note else [])
    return ScalingPlan(application_id=application_id, group=group.name, joins=list(group.joins), mode=mode,
                       partitions=current, new_partitions=partitions, topics=scaled, stores=stores, stages=stages,
                       rewrites=rewrites, downtime_s=round(downtime, 1), observed=observed,
                       created_at=datetime.fromtimestamp(now / 1000, UTC).isoformat(timespec="milliseconds")
                       .replace("+00:00", "Z"), in_place=in_place, application=application, notes=notes)


def _topic_scaling(member: GroupTopic, physical: Mapping[str, str], new_physical: Mapping[str, str],
                   generation: Mapping[str, int], new_generation: Mapping[str, int], partitions: int,
                   observed: Observation) -> TopicScaling:
    topic = member.topic
    shape = observed.topics[physical[topic]]
    committed = [observed.committed.get(f"{physical[topic]}[{p}]") if member.role in _READ_ROLES else None
                 for p in range(shape["partitions"])]
    return TopicScaling(topic, member.role, physical[topic], generation[topic], new_physical[topic],
                        new_generation[topic], shape["partitions"], partitions, list(shape["earliest"]),
                        list(shape["end"]), committed, member.store, member.subtopology)


def _stages(scaled: list[TopicScaling], stores: list[StoreScaling], rewrites: list[str], partitions: int,
            in_place: InPlacePlan | None, snapshots: int) -> list[Stage]:
    by_topic = {t.topic: t for t in scaled}
    stages = [Stage("drain", "admin", "wait until the group's committed offsets reach the ends of its inputs",
                    sum(t.undrained for t in scaled))]
    if in_place is not None:
        stages.append(Stage("create-partitions", "admin",
                            f"CreatePartitions: {len(scaled)} topics to {partitions} partitions"))
        stages.append(Stage("commit-zero", "admin", f"commit offset 0 on {len(in_place.commit_zero)} new partitions "
                                                    f"before producers see them"))
        for s in stores:
            stages.append(Stage("move-state", "spark", f"{by_topic[s.changelog].physical}: "
                                                       f"{_IN_PLACE_MOVES[s.placement].format(kind=s.kind)}",
                                s.records))
    else:
        stages.append(Stage("create", "admin", f"create {len(scaled)} topics of the new generation with "
                                               f"{partitions} partitions"))
        for t in scaled:
            if t.role in _READ_ROLES:
                stages.append(Stage("copy", "spark", f"{t.physical} -> {t.new_physical}: re-partition by "
                                                     f"murmur2(key) % {partitions}, each key's records in offset "
                                                     f"order with timestamps and headers", t.records))
        for s in stores:
            t = by_topic[s.changelog]
            what = _MIGRATE_MOVES[s.placement].format(kind=s.kind, n=partitions)
            stages.append(Stage("reshard", "spark", f"{t.physical} -> {t.new_physical}: {what}",
                                0 if s.placement == Placement.DROP else s.records))
    for store in rewrites:
        stages.append(Stage("rewrite", "spark", f"subscription store {store}: the left partition in each value "
                                                f"becomes murmur2(left key) % {partitions}"))
    for t in scaled:
        if t.role == "stream-time":
            stages.append(Stage("stream-time", "admin", f"{t.new_physical}: one record per task, the highest time "
                                                        f"of the old tasks"))
    stages.append(Stage("verify", "spark", "per store: key count and checksum of (key, value) equal before and "
                                           "after (replicated: of the distinct entries); by-key stores: every key "
                                           "in its record key's partition, none in two",
                        sum(s.records for s in stores if s.placement != Placement.DROP)))
    if in_place is None:
        stages.append(Stage("commit", "admin", "the group's offsets on the new generation at the copied ends"))
        stages.append(Stage("switch", "admin", "the platform spec names the new generation of every topic"))
    stages.append(Stage("epoch", "admin", f"bump the reset epoch: workers drop local state of the old partitioning; "
                                          f"its {snapshots} snapshot(s) of the group's stores are retired"))
    return stages


_MIGRATE_MOVES = {
    Placement.BY_KEY: "latest value per key (snapshot + tail), record key by layout {kind}, murmur2 % {n}; a snapshot "
                      "per new partition",
    Placement.REPLICATE: "latest value per key (snapshot + tail), each copied to every new partition that receives "
                         "keys of its old partition; a snapshot per new partition",
    Placement.DROP: "not copied: the store starts empty",
}
_IN_PLACE_MOVES = {
    Placement.BY_KEY: "keys whose record key ({kind}) hashes to another partition move there (a tombstone in the "
                      "old one)",
    Placement.REPLICATE: "each key copied to every new partition that receives keys of its partition",
    Placement.DROP: "emptied (a tombstone per key)",
}


def _placements(group: ScalingGroup, placements: Mapping[str, str]) -> dict[str, Placement]:
    stores = [t.store for t in group.topics if t.store]
    chosen = {}
    for store, placement in placements.items():
        if store not in stores:
            raise ScalingError(f"store {store!r} is not a store of co-partition group {group.name!r} (its stores: "
                               f"{', '.join(stores) or 'none'})")
        try:
            chosen[store] = Placement(placement)
        except ValueError:
            raise ScalingError(f"placement of store {store!r} must be 'by-key', 'replicate' or 'drop', got "
                               f"{placement!r}") from None
    return chosen


def _notes(scaled: list[TopicScaling], stores: list[StoreScaling], placements: Mapping[str, Placement],
           mode: str) -> list[str]:
    notes = []
    for s in stores:
        if s.processor_api and s.store not in placements:
            notes.append(f"store {s.store} is written by Processor API processor(s) {', '.join(s.processor_api)}: "
                         f"re-sharded by its key as a record key; if its keys are not the record keys, choose the "
                         f"placement 'replicate' or 'drop' for it")
    absent = [t.physical for t in scaled if t.partitions == 0]
    if absent:
        notes.append(f"not created yet (the runtime creates them with {scaled[0].new_partitions} partitions): "
                     f"{', '.join(absent)}")
    if mode == "migrate":
        notes.append("producers must stop writing the old generation before the drain ends, and write the new one "
                     "with the murmur2 partitioner; the old generation stays until deleted in a separate step")
    return notes
