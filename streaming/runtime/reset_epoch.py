"""The application's reset epoch: how workers learn that the application was reset while they were stopped.

An application reset (:mod:`streaming.reset`) deletes the changelogs and moves the input offsets, but no tool can
reach the local state on the workers' disks (Kafka Streams asks its users to call ``KafkaStreams#cleanUp()`` on
every instance, or get wrong results). So each reset writes a new epoch to ``<application.id>-epoch`` (compacted,
one partition, key ``epoch``; a reset never deletes it: Kafka is the one thing every worker shares)::

    {"version": 1, "epoch": "3", "reset_at": 1700000000000, "plan": "<the plan's fingerprint>"}

Epochs are ``"none"`` (never reset), then ``"1"``, ``"2"``, ... A starting worker reads the current epoch (to
partition EOF, never ListOffsets) before any task opens, and compares it with the epoch its state directory
``state.dir/<application.id>/`` was written under (the file ``.reset-epoch`` there, written at every start):
when they differ, everything in the directory but its lock is wiped — task and standby stores, checkpoints,
global stores — and restored from the (re-created) changelogs. One marker per directory rather than one per
checkpoint: it also covers what no checkpoint vouches for (a crash leaves none) and stores without a changelog.
The same epoch is part of each snapshot's store identity (:mod:`streaming.state.store_identity`), so snapshots
made before a reset are never loaded after it.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Producer

from streaming.admin import TopicError, create_topics, partition_counts, read_to_end
from streaming.errors import StreamsError
from streaming.naming import epoch_topic
from streaming.runtime.directory_lock import LOCK_FILE, DirectoryLock
from streaming.runtime.state_directory import clear_application_dir
from streaming.state.store_identity import NONE

__all__ = ["EPOCH_FILE", "EPOCH_KEY", "ResetEpoch", "next_epoch", "read_reset_epoch", "wipe_state_of_other_epoch",
           "write_reset_epoch"]

log = logging.getLogger(__name__)

EPOCH_KEY = b"epoch"
EPOCH_FILE = ".reset-epoch"
_VERSION = 1


@dataclass(frozen=True)
class ResetEpoch:
    """The application's reset epoch (``"none"`` before the first reset), when that reset ran (epoch ms) and the
    fingerprint of its plan."""

    epoch: str = NONE
    reset_at: int | None = None
    plan: str | None = None

    def to_json(self) -> bytes:
        """The record value written to ``<application.id>-epoch``."""
        return json.dumps({"version": _VERSION, "epoch": self.epoch, "reset_at": self.reset_at,
                           "plan": self.plan}).encode()


def next_epoch(current: str) -> str:
    """The epoch a reset of an application at ``current`` writes: ``none`` -> ``1`` -> ``2`` ..."""
    return "1" if current == NONE else str(int(current) + 1)


def read_reset_epoch(client_config: Mapping[str, Any], application_id: str, timeout: float = 30.0) -> ResetEpoch:
    """The current epoch of ``application_id``: the last ``epoch`` record of ``<application.id>-epoch``, read to
    partition EOF (``none`` when the topic does not exist). Raises :class:`StreamsError` naming the topic, offset
    and problem for a record it cannot read."""
    topic = epoch_topic(application_id)
    if partition_counts(client_config["bootstrap.servers"], [topic], client_config)[topic] is None:
        return ResetEpoch()
    current = ResetEpoch()
    try:
        for message in read_to_end(client_config, [(topic, 0, OFFSET_BEGINNING)], timeout=timeout):
            if message.key() != EPOCH_KEY or message.value() is None:
                continue
            try:
                raw = json.loads(message.value())
                current = ResetEpoch(str(raw["epoch"]), raw.get("reset_at"), raw.get("plan"))
            except (ValueError, KeyError, TypeError) as exc:
                raise StreamsError(f"cannot read the reset epoch at {topic}[0]@{message.offset()}: "
                                   f"{type(exc).__name__}: {exc}") from None
    except TopicError as exc:
        raise StreamsError(f"cannot read the reset epoch from {topic}: {exc}") from None
    return current


def write_reset_epoch(client_config: Mapping[str, Any], application_id: str, epoch: ResetEpoch,
                      timeout: float = 30.0) -> None:
    """Write ``epoch`` as the application's current epoch (creating ``<application.id>-epoch``: one partition,
    compacted) and wait for the broker's acknowledgement. Raises :class:`StreamsError` naming the topic."""
    topic = epoch_topic(application_id)
    config = dict(client_config)
    create_topics(config["bootstrap.servers"], {topic: 1}, configs={topic: {"cleanup.policy": "compact"}},
                  client_config=config)
    failures: list[str] = []
    producer = Producer({**config, "enable.idempotence": True, "linger.ms": 0})
    producer.produce(topic, epoch.to_json(), EPOCH_KEY, partition=0,
                     on_delivery=lambda error, _: failures.append(str(error)) if error is not None else None)
    if producer.flush(timeout) > 0 or failures:
        raise StreamsError(f"the reset epoch {epoch.epoch} was not acknowledged by {topic}: "
                           f"{failures[0] if failures else f'no answer within {timeout:g} s'}")


def wipe_state_of_other_epoch(lock: DirectoryLock, epoch: ResetEpoch) -> list[str]:
    """Wipe the locked application directory when it was written under another reset epoch than ``epoch``
    (module doc), then record ``epoch`` in it. Returns the names wiped (empty when nothing was)."""
    directory = lock.directory
    marker = os.path.join(directory, EPOCH_FILE)
    content = sorted(name for name in os.listdir(directory) if name not in (LOCK_FILE, EPOCH_FILE))
    written_under = _marker_epoch(marker)
    wiped: list[str] = []
    if content and written_under != epoch.epoch:
        when = "" if epoch.reset_at is None else \
            f" (reset at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(epoch.reset_at / 1000))})"
        log.warning("state directory %s was written under reset epoch %s, the application is at reset epoch %s%s: "
                    "wiping its local state (%s) to restore it from the changelogs", directory, written_under,
                    epoch.epoch, when, ", ".join(content))
        clear_application_dir(lock)
        wiped = content
    if written_under != epoch.epoch or not os.path.exists(marker):
        with open(marker + ".tmp", "w") as file:
            json.dump({"reset_epoch": epoch.epoch}, file)
        os.replace(marker + ".tmp", marker)
    return wiped


def _marker_epoch(path: str) -> str:
    """The epoch ``path`` records; ``none`` when it is missing (written before reset epochs existed) or
    unreadable (then the directory is wiped unless the application was never reset)."""
    try:
        with open(path) as file:
            return str(json.load(file)["reset_epoch"])
    except FileNotFoundError:
        return NONE
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("unreadable reset epoch file %s (%s): taking it as epoch none", path, exc)
        return NONE
