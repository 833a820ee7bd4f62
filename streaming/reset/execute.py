"""Carrying out a reset plan, exactly as the dry run wrote it, or not at all.

:func:`execute_plan` first checks, changing nothing: that no instance of the application is alive
(:func:`streaming.runtime.membership.refuse_while_alive`), and that the cluster is still what the plan saw (its
fingerprint: committed offsets, first and end offsets, topics and their ids, the reset epoch, the snapshots);
otherwise it refuses with one line naming what changed. Then, in this order:

1. the new reset epoch is written to ``<application.id>-epoch`` (from now on every starting worker wipes local
   state of the old epoch: safe whatever happens next);
2. the stores' snapshots are retired (moved to ``retired/<old epoch>/``);
3. the internal topics are deleted (waiting until the cluster no longer lists them) and re-created empty, with the
   plan's partition counts and configs (waiting until each has a new topic id);
4. the group's offsets are committed: inputs and intermediate topics to the plan's offsets, the re-created internal
   topics the app reads to 0; then read back and compared.

Offsets are committed as Kafka's own ``StreamsResetter`` does it, through a consumer with the application's group
id that never joins the group (``assign``, then ``commit``): a broker accepts that only while the group has no
members, which the first check made sure of. It works the same on the embedded broker and on Apache Kafka
(``AdminClient.alter_consumer_group_offsets`` would too on Kafka; the measurements are in
``platform/runbooks/reset.md``). A step that fails stops the reset with the steps done named: run a new dry run
and execute that (the epoch is already bumped, so no worker keeps old local state meanwhile).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from streaming.admin import TopicError, create_topics, delete_topics
from streaming.reset.cluster import committed_offsets, observe, topic_ids
from streaming.reset.errors import ResetError, StalePlanError
from streaming.reset.plan import ResetPlan
from streaming.runtime.membership import STALE_AFTER_S, refuse_while_alive
from streaming.runtime.reset_epoch import ResetEpoch, write_reset_epoch

__all__ = ["ResetResult", "execute_plan"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ResetResult:
    """What an executed reset did."""

    plan: ResetPlan
    committed: dict[str, int]
    recreated: tuple[str, ...]
    retired: tuple[str, ...]
    duration_s: float


def execute_plan(plan: ResetPlan, client_config: Mapping[str, Any], *, stale_after_s: float = STALE_AFTER_S,
                 progress: Callable[[str], None] = log.info, timeout: float = 60.0) -> ResetResult:
    """Carry out ``plan`` (module doc); ``progress`` hears one line per step.

    Raises:
        LiveWorkersError: an instance of the application is alive (nothing changed).
        StalePlanError: the cluster changed since the plan was made (nothing changed; names what changed).
        ResetError: a step failed (names it and the steps done).
    """
    started = time.monotonic()
    config = dict(client_config)
    application_id = plan.application_id
    refuse_while_alive(config, application_id, f"reset application {application_id!r}", stale_after_s=stale_after_s)
    current = observe(config, application_id, plan.observed.topics, plan.snapshot_location, plan.observed.snapshots)
    if current.fingerprint() != plan.observed.fingerprint():
        changes = current.changes_since(plan.observed) or ["the observation differs"]
        more = f" and {len(changes) - 3} more" if len(changes) > 3 else ""
        raise StalePlanError(f"the plan of {plan.created_at} is stale, nothing was changed: {'; '.join(changes[:3])}"
                             f"{more}. Make a new plan with a dry run")
    done: list[str] = []

    def step(what: str, action: Callable[[], Any]) -> Any:
        try:
            result = action()
        except (ResetError, TopicError, KafkaException, OSError, ValueError) as exc:
            raise ResetError(f"reset of {application_id!r} failed at: {what}: {exc} (done: "
                             f"{', '.join(done) or 'nothing'}). Make a new plan with a dry run and execute it") from exc
        done.append(what)
        progress(what)
        return result

    epoch = ResetEpoch(plan.epoch_after, int(time.time() * 1000), plan.fingerprint)
    step(f"reset epoch {plan.epoch_before} -> {plan.epoch_after} written",
         lambda: write_reset_epoch(config, application_id, epoch))
    retired = tuple(step(f"snapshot {s.snapshot_id} of store {s.store} retired",
                         lambda s=s: _retire(plan, s.store, s.snapshot_id)) for s in plan.snapshots)
    if plan.recreate:
        step(f"{len(plan.recreate)} internal topic(s) deleted and re-created",
             lambda: _recreate(plan, config, timeout))
    wanted = {f"{o.topic}[{o.partition}]": o.after for o in plan.offsets}
    committed = step(f"{len(wanted)} offsets committed for group {application_id}",
                     lambda: _commit(plan, config, wanted, timeout))
    return ResetResult(plan, committed, tuple(t.topic for t in plan.recreate), retired,
                       time.monotonic() - started)


def _retire(plan: ResetPlan, store: str, snapshot_id: str) -> str:
    from streaming.state import snapshots

    assert plan.snapshot_location is not None  # a plan lists snapshots only with a location
    manifest = snapshots.read_manifest(plan.snapshot_location, plan.application_id, store, snapshot_id)
    try:
        return snapshots.retire(plan.snapshot_location, manifest)
    except snapshots.SnapshotError as exc:
        raise ResetError(str(exc)) from None


def _recreate(plan: ResetPlan, config: dict[str, Any], timeout: float) -> None:
    """Delete the plan's internal topics, then create them until each has a topic id it did not have (a broker
    may still be deleting the old topic when the create arrives)."""
    old_ids = {t.topic: plan.observed.topics[t.topic]["id"] for t in plan.recreate}
    delete_topics(config["bootstrap.servers"], [t.topic for t in plan.recreate if t.exists], client_config=config,
                  timeout=timeout)
    admin = AdminClient(config)
    deadline = time.monotonic() + timeout
    pending = list(plan.recreate)
    while pending:
        create_topics(config["bootstrap.servers"], {t.topic: t.partitions for t in pending},
                      configs={t.topic: t.configs for t in pending}, client_config=config,
                      timeout=max(deadline - time.monotonic(), 1.0))
        ids = topic_ids(admin, [t.topic for t in pending], timeout)
        pending = [t for t in pending if ids[t.topic] != "none" and ids[t.topic] == old_ids[t.topic]]
        if pending and time.monotonic() > deadline:
            raise ResetError(f"topics {[t.topic for t in pending]} still have their old topic ids {timeout:g} s "
                             f"after they were deleted")
        if pending:
            time.sleep(0.5)


def _commit(plan: ResetPlan, config: dict[str, Any], wanted: dict[str, int], timeout: float) -> dict[str, int]:
    """Commit ``wanted`` for the group as StreamsResetter does (module doc), then read it back."""
    offsets = [TopicPartition(o.topic, o.partition, o.after) for o in plan.offsets]
    if offsets:
        consumer = Consumer({**config, "group.id": plan.application_id, "enable.auto.commit": False,
                             "client.id": f"brook-reset-{uuid.uuid4().hex[:8]}"})
        try:
            result = consumer.commit(offsets=offsets, asynchronous=False)
        finally:
            consumer.close()
        failed = [f"{tp.topic}[{tp.partition}]: {tp.error.str()}" for tp in result or [] if tp.error is not None]
        if failed:
            raise ResetError(f"the broker refused offsets: {'; '.join(failed[:3])}")
    committed = committed_offsets(AdminClient(config), plan.application_id, timeout)
    wrong = [f"{key} is {committed.get(key, '-')}, not {offset}" for key, offset in wanted.items()
             if committed.get(key) != offset]
    if wrong:
        raise ResetError(f"committed offsets read back differ from the plan: {'; '.join(wrong[:3])}")
    return {key: committed[key] for key in wanted}
