"""Carrying out a ``migrate`` scaling plan (:mod:`streaming.scaling.plan`), exactly as the dry run wrote it, or not
at all: the ``scale_<app>`` job and ``brook app scale --execute`` both call :func:`execute_migration`.

First, changing nothing: no instance of the application is alive (:func:`streaming.runtime.membership.
refuse_while_alive`), the cluster is still what the plan saw (its fingerprint), and the drain is complete (every
record of the group's inputs, intermediate and repartition topics was committed when the workers stopped: with
them stopped nothing else can process it). Then, in the plan's order:

1. **create** the new generation's topics with N partitions: the inputs with ``input_configs`` (the platform
   spec's), the internal topics with the configs the runtime creates them with (the topology bound to the new
   generations: :func:`streaming.runtime.internal_topics.internal_topic_specs`);
2. **copy** the inputs, intermediate and repartition topics, and **re-shard** every store's changelog, with Spark
   (:mod:`assets.scaling.migrate`, each verified there: key counts and checksums, placement);
3. **stream-time**: one record per new task, the highest time of the old tasks;
4. **commit** the group's offsets on the new generation at the copied ends: nothing copied is processed again;
5. **epoch**: a new reset epoch (workers wipe local state of the old partitioning on start) and the group's stores'
   snapshots retired; then fresh **snapshots** of the new changelogs by the platform's compaction (from the
   re-shard's read-back of them, still cached), so workers restore from a snapshot instead of replaying the
   changelog;
6. **switch**: the platform spec names the new generation of every topic moved (:mod:`assets.scaling.spec_file`).

A failure stops the run with the stages done named; until the switch the spec still names the old generation,
whose topics are untouched, so the workers can be started again as they were (after the epoch, they restore their
stores from the old changelogs). The old generation is kept until the operator deletes it (the runbook's last step).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from assets.scaling.migrate import ReshardResult, copy_topic, reshard_changelog
from assets.scaling.spec_file import switch_generations
from assets.scaling.stages import commit_offsets, write_stream_time
from assets.spark.compaction import ReadChangelog, compact_changelog
from streaming.admin import create_topics
from streaming.reset.cluster import observe
from streaming.runtime.internal_topics import internal_topic_specs
from streaming.runtime.membership import refuse_while_alive
from streaming.runtime.reset_epoch import ResetEpoch, next_epoch, read_reset_epoch, write_reset_epoch
from streaming.scaling.errors import ScalingError
from streaming.scaling.plan import ScalingPlan
from streaming.state import snapshots

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from streaming.topology.topology import Topology

__all__ = ["MigrationResult", "execute_migration"]

log = logging.getLogger(__name__)
_READ_ROLES = ("input", "intermediate", "repartition")


@dataclass
class MigrationResult:
    """What a migration did: per stage its duration, the group's committed offsets on the new generation, the
    records copied and the keys re-sharded, the new snapshots, and the spec's new generations."""

    plan: ScalingPlan
    stages: dict[str, float] = field(default_factory=dict)
    committed: dict[str, int] = field(default_factory=dict)
    copied: int = 0
    resharded_keys: dict[str, int] = field(default_factory=dict)
    snapshots: dict[str, str] = field(default_factory=dict)
    generations: dict[str, int] = field(default_factory=dict)
    duration_s: float = 0.0


def execute_migration(spark: SparkSession, plan: ScalingPlan, topology: Callable[[], Topology],
                      client_config: Mapping[str, Any],
                      *, spec_path: Path, snapshot_location: str | None, input_configs: Mapping[str, Mapping[str, str]],
                      progress: Callable[[str], None] = log.info, keep_snapshots: int = 3) -> MigrationResult:
    """Carry out the ``migrate`` ``plan`` of the app ``topology()`` builds (module doc); ``progress`` hears one line
    per stage.

    Raises:
        LiveWorkersError: an instance of the application is alive (nothing changed).
        ScalingError: the plan is not a migration, is stale, the drain is not complete (nothing changed), or a stage
            failed (names it and the stages done).
    """
    started = time.monotonic()
    config = dict(client_config)
    app = plan.application_id
    if plan.mode != "migrate":
        raise ScalingError(f"the plan of {app!r} is {plan.mode!r}: only 'migrate' is carried out here")
    refuse_while_alive(config, app, f"scale application {app!r}")
    current = observe(config, app, list(plan.observed.topics), snapshot_location, list(plan.observed.snapshots))
    if current.fingerprint() != plan.observed.fingerprint():
        changes = current.changes_since(plan.observed) or ["the observation differs"]
        raise ScalingError(f"the plan of {plan.created_at} is stale, nothing was changed: {'; '.join(changes[:3])}. "
                           f"Make a new plan with a dry run")
    undrained = {t.physical: t.undrained for t in plan.topics if t.undrained}
    if undrained:
        raise ScalingError(f"the drain is not complete, nothing was changed: {sum(undrained.values())} records were not "
                           f"processed when the workers stopped ({undrained}). Stop the producers, start the workers "
                           f"until their lag is 0, stop them, and plan again")
    result = MigrationResult(plan)
    done: list[str] = []

    def stage(name: str, action: Callable[[], Any]) -> Any:
        begun = time.monotonic()
        try:
            value = action()
        except Exception as exc:
            raise ScalingError(f"scaling of {app!r} failed at stage {name}: {exc} (done: {', '.join(done) or 'nothing'}"
                               f"; the platform spec still names the old generation)") from exc
        result.stages[name] = round(time.monotonic() - begun, 3)
        done.append(name)
        progress(f"{name}: done in {result.stages[name]:.1f} s")
        return value

    generations = {t.topic: t.new_generation for t in plan.topics}
    stage("create", lambda: _create(plan, topology, config, input_configs, generations))
    offsets: dict[tuple[str, int], int] = {}
    for topic in plan.topics:
        if topic.role in _READ_ROLES:
            ends = stage(f"copy {topic.physical} -> {topic.new_physical}", lambda t=topic: copy_topic(spark, config, t))
            offsets.update({(topic.new_physical, p): end for p, end in enumerate(ends)})
            result.copied += sum(ends)
    by_changelog = {t.topic: t for t in plan.topics if t.store is not None}
    left = plan.new_partitions if plan.rewrites else None
    resharded: dict[str, ReshardResult] = {}
    try:
        for store in plan.stores:
            topic = by_changelog[store.changelog]
            resharded[store.store] = stage(f"reshard {store.store}", lambda s=store, t=topic: reshard_changelog(
                spark, config, s, t, left_partitions=left if s.store in plan.rewrites else None))
            result.resharded_keys[store.store] = resharded[store.store].after.keys
        for topic in plan.topics:
            if topic.role == "stream-time":
                stage(f"stream-time {topic.new_physical}", lambda t=topic: write_stream_time(config, plan, t, offsets))
        result.committed = stage("commit", lambda: commit_offsets(config, app, offsets)) if offsets else {}
        stage("epoch", lambda: _bump_epoch(plan, config, snapshot_location))
        if snapshot_location:
            for store in plan.stores:
                topic = by_changelog[store.changelog]
                result.snapshots[store.store] = stage(f"snapshot {store.store}", lambda s=store, t=topic: _snapshot(
                    spark, config, snapshot_location, app, s.store, t.new_physical, keep_snapshots,
                    resharded[s.store].changelog))
    finally:
        for done_store in resharded.values():
            done_store.release()
    stage("switch", lambda: switch_generations(spec_path, {t.topic: (t.new_generation, t.new_partitions)
                                                           for t in plan.topics}))
    result.generations = generations
    result.duration_s = round(time.monotonic() - started, 3)
    return result


def _create(plan: ScalingPlan, topology: Callable[[], Topology], config: dict[str, Any],
            input_configs: Mapping[str, Mapping[str, str]], generations: Mapping[str, int]) -> None:
    """The new generation's topics, with their configs (module doc, stage 1)."""
    from streaming.topic_generations import TopicGenerations

    bound = topology().bind(plan.application_id, TopicGenerations(generations))
    counts = {t.new_physical: t.new_partitions for t in plan.topics if t.role in ("input", "intermediate")}
    internal = internal_topic_specs(bound, plan.application_id, counts)
    wanted = {t.new_physical: t.new_partitions for t in plan.topics}
    configs = {t.new_physical: dict(internal[t.new_physical].configs) if t.new_physical in internal
               else dict(input_configs.get(t.topic, {})) for t in plan.topics}
    create_topics(config["bootstrap.servers"], wanted, configs=configs, client_config=config)


def _bump_epoch(plan: ScalingPlan, config: dict[str, Any], location: str | None) -> str:
    """A new reset epoch, and the group's stores' snapshots retired (module doc, stage 5)."""
    before = read_reset_epoch(config, plan.application_id).epoch
    after = next_epoch(before)
    write_reset_epoch(config, plan.application_id, ResetEpoch(after, int(time.time() * 1000), f"scaling {plan.group}"))
    if location:
        for store in plan.stores:
            for snapshot_id in snapshots.list_snapshot_ids(location, plan.application_id, store.store):
                snapshots.retire(location, snapshots.read_manifest(location, plan.application_id, store.store,
                                                                   snapshot_id))
    return after


def _snapshot(spark: SparkSession, config: dict[str, Any], location: str, app: str, store: str, changelog: str,
              keep: int, read: ReadChangelog | None) -> str:
    """A fresh snapshot of ``store``'s new ``changelog`` by the platform's compaction, from the re-shard's read-back
    of it (``read``; the changelog is read again when there is none)."""
    return compact_changelog(spark, client_config=config, location=location, application_id=app, store=store,
                             changelog_topic=changelog, keep=keep, read=read).manifest.snapshot_id
