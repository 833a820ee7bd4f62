"""A store's identity: which changelog, of which incarnation, a snapshot of the store was made from.

A snapshot (:mod:`streaming.state.snapshots`) is only the store's state if the changelog it was made from is
the changelog a worker restores from or compaction continues now. Offsets alone cannot tell: a changelog
deleted and recreated (an application reset, a broker that lost its storage, a re-partitioning with old
snapshots left behind) starts again at offset 0 and may already be longer than the snapshot's offsets.
:class:`StoreIdentity` names everything that must match, and :meth:`StoreIdentity.conflict` is the one rule,
used by the worker's restore (:mod:`streaming.runtime.snapshots`) and by compaction's plan
(``assets/spark/compaction.py``):

- ``application_id``, ``store``, ``changelog_topic``: the same store;
- ``partitions``: the changelog's partition count (a snapshot of 8 partitions is not a snapshot of 4: the keys
  hash to other partitions);
- ``changelog_id``: the broker's topic id of the changelog (``DescribeTopics``; Apache Kafka since 2.8, and the
  embedded broker, measured: Tansu gives every created topic a new random id, so a recreated changelog has
  another). Compared only when both sides know it: a broker that reports none (the zero UUID) gives ``none``,
  and then the partition count and the offset checks of both sides are what is left;
- ``reset_epoch``: the application's reset epoch (an application reset writes a new one on the compacted
  ``<application.id>-epoch`` topic); ``none`` until the app was ever reset. Must be equal: a snapshot made
  before a reset is not the state after it;
- ``generation``: the topic generation of the changelog (partition scaling migrates ``orders`` to
  ``orders.v2`` and internal topics with it); ``none`` for the first. Must be equal.

Manifests written before identities existed get one derived from their own fields (topic id, epoch and
generation ``none``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["NONE", "StoreIdentity", "StoreIdentityError", "live_identity"]

#: The value of an identity field that is not known or not in use.
NONE = "none"
_ZERO_TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAA"  # Kafka's Uuid.ZERO_UUID, base64: a broker without topic ids


class StoreIdentityError(Exception):
    """The changelog's identity cannot be read from the broker (names the topic)."""


@dataclass(frozen=True)
class StoreIdentity:
    """Which changelog, and which incarnation of it, a store's snapshot belongs to (module doc)."""

    application_id: str
    store: str
    changelog_topic: str
    partitions: int
    changelog_id: str = NONE
    reset_epoch: str = NONE
    generation: str = NONE

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> StoreIdentity:
        """Raises KeyError, TypeError or ValueError for a malformed identity (the manifest reader names the file)."""
        return cls(application_id=str(raw["application_id"]), store=str(raw["store"]),
                   changelog_topic=str(raw["changelog_topic"]), partitions=int(raw["partitions"]),
                   changelog_id=str(raw.get("changelog_id", NONE)), reset_epoch=str(raw.get("reset_epoch", NONE)),
                   generation=str(raw.get("generation", NONE)))

    def conflict(self, live: StoreIdentity) -> str | None:
        """Why a snapshot made under this identity is not the state of the changelog ``live`` describes (None:
        it is, as far as identities tell; the offsets are checked by each side)."""
        if (self.application_id, self.store) != (live.application_id, live.store):
            return (f"it is a snapshot of store {self.store!r} of application {self.application_id!r}, not of "
                    f"{live.store!r} of {live.application_id!r}")
        if self.changelog_topic != live.changelog_topic:
            return f"it covers changelog {self.changelog_topic}, not {live.changelog_topic}"
        if NONE not in (self.changelog_id, live.changelog_id) and self.changelog_id != live.changelog_id:
            return (f"changelog {live.changelog_topic} was recreated: its topic id is {live.changelog_id}, the "
                    f"snapshot was made from topic id {self.changelog_id}")
        if self.partitions != live.partitions:
            return (f"it covers {self.partitions} partition(s) of changelog {live.changelog_topic}, which has "
                    f"{live.partitions}: was the topic recreated or re-partitioned?")
        if self.reset_epoch != live.reset_epoch:
            return (f"it was made under reset epoch {self.reset_epoch}, the application is at reset epoch "
                    f"{live.reset_epoch}")
        if self.generation != live.generation:
            return f"it was made from topic generation {self.generation}, the store is at generation {live.generation}"
        return None


def live_identity(client_config: Mapping[str, Any], application_id: str, store: str, changelog_topic: str, *,
                  reset_epoch: str = NONE, generation: str = NONE, timeout: float = 10.0) -> StoreIdentity:
    """The identity of ``store``'s changelog as the broker describes it now (``client_config``: librdkafka
    settings with ``bootstrap.servers`` and security).

    Raises:
        StoreIdentityError: the topic does not exist or the broker did not answer (names the topic).
    """
    from confluent_kafka import KafkaException, TopicCollection
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(dict(client_config))
    try:
        description = admin.describe_topics(TopicCollection([changelog_topic]),
                                            request_timeout=timeout)[changelog_topic].result(timeout)
    except KafkaException as exc:
        raise StoreIdentityError(f"cannot describe changelog {changelog_topic}: {exc.args[0]}") from None
    except TimeoutError:
        raise StoreIdentityError(f"cannot describe changelog {changelog_topic}: no answer in {timeout:.0f} s") from None
    topic_id = NONE if description.topic_id is None else str(description.topic_id)
    return StoreIdentity(application_id, store, changelog_topic, len(description.partitions),
                         changelog_id=NONE if topic_id == _ZERO_TOPIC_ID else topic_id,
                         reset_epoch=reset_epoch, generation=generation)
