"""The names Brook gives what it owns, in one public place: internal topics, and the rules for the user's
names that become parts of them.

Kafka Streams names its internal topics ``<application.id>-<store>-changelog``,
``<application.id>-<name>-repartition``, and a foreign-key join's
``<application.id>-<join>-subscription-registration-topic`` and
``<application.id>-<join>-subscription-response-topic``; Brook adds ``<application.id>-metadata``
(which instances run, and their assignments), ``<application.id>-epoch`` (the reset epoch),
``<application.id>-dlq`` (dead letters), ``<application.id>-dlq-replayed`` (dead letters replayed),
``<application.id>-shed`` (records shed beyond the rate limit), ``<application.id>-alerts`` (idle-source alerts) and
``<application.id>-<subtopology>-stream-time`` (the stream time of a stateful sub-topology's tasks, which
Kafka Streams keeps in the offset commit's metadata only). ``assets/`` and ``bench/`` build these names from here, never by hand.

A store name and an ``application.id`` become part of a topic name *and* of a directory under
``state.dir``, so both must be legal topic-name parts: letters, digits, ``.``, ``_`` and ``-``, and not
``.`` or ``..`` (which would name a directory above the one meant).
"""

from __future__ import annotations

import re
from typing import Any

from streaming.errors import TopologyError

_LEGAL = re.compile(r"[A-Za-z0-9._-]+")
MAX_NAME_LENGTH = 200  # leaves room for "<application.id>-" and "-changelog" within Kafka's 249


def is_legal_name(name: Any) -> bool:
    """Whether ``name`` can be part of a topic name and a directory name."""
    return (isinstance(name, str) and len(name) <= MAX_NAME_LENGTH and _LEGAL.fullmatch(name) is not None
            and name not in (".", ".."))


MAX_TOPIC_NAME_LENGTH = 249  # Kafka's limit


def is_legal_topic_name(name: str) -> bool:
    """Whether Kafka takes ``name`` as a topic name (Kafka's ``Topic.validate``)."""
    return len(name) <= MAX_TOPIC_NAME_LENGTH and _LEGAL.fullmatch(name) is not None and name not in (".", "..")


def check_store_name(name: Any) -> str:
    """``name`` if it is a legal store name, else :class:`TopologyError` saying why."""
    if not is_legal_name(name):
        raise TopologyError(f"store name {name!r} is not valid: it names the changelog topic and the store's "
                            f"directory, so use 1-{MAX_NAME_LENGTH} letters, digits, '.', '_' or '-' "
                            f"(not '.' or '..')")
    return name


CHANGELOG_SUFFIX = "-changelog"


def changelog_topic(application_id: str, store: str) -> str:
    """A store's changelog topic: ``<application.id>-<store>-changelog``."""
    return f"{application_id}-{store}{CHANGELOG_SUFFIX}"


def store_of_changelog(application_id: str, topic: str) -> str | None:
    """The store whose changelog ``topic`` is, for application ``application_id`` (None if it is not one)."""
    prefix = f"{application_id}-"
    if not topic.startswith(prefix) or not topic.endswith(CHANGELOG_SUFFIX) or \
            len(topic) <= len(prefix) + len(CHANGELOG_SUFFIX):
        return None
    return topic[len(prefix):-len(CHANGELOG_SUFFIX)]


REPARTITION_SUFFIX = "-repartition"


def repartition_topic(application_id: str, name: str) -> str:
    """A repartition topic: ``<application.id>-<name>-repartition`` (``name`` may end with the suffix)."""
    base = name.removesuffix(REPARTITION_SUFFIX)
    return f"{application_id}-{base}{REPARTITION_SUFFIX}"


SUBSCRIPTION_REGISTRATION_SUFFIX = "-subscription-registration-topic"
SUBSCRIPTION_RESPONSE_SUFFIX = "-subscription-response-topic"


def subscription_registration_topic(application_id: str, join: str) -> str:
    """A foreign-key join's subscriptions (left rows to the right table's partitions):
    ``<application.id>-<join>-subscription-registration-topic``."""
    return f"{application_id}-{join}{SUBSCRIPTION_REGISTRATION_SUFFIX}"


def subscription_response_topic(application_id: str, join: str) -> str:
    """A foreign-key join's responses (right values back to the left rows' partitions):
    ``<application.id>-<join>-subscription-response-topic``."""
    return f"{application_id}-{join}{SUBSCRIPTION_RESPONSE_SUFFIX}"


def metadata_topic(application_id: str) -> str:
    """The topic every instance announces itself and its assignment on: ``<application.id>-metadata``."""
    return f"{application_id}-metadata"


def epoch_topic(application_id: str) -> str:
    """The application's reset epoch (``streaming.runtime.reset_epoch``): ``<application.id>-epoch``. Not an
    internal topic of the topology: an application reset never deletes it."""
    return f"{application_id}-epoch"


DEAD_LETTER_SUFFIX = "-dlq"


def dead_letter_topic(application_id: str) -> str:
    """Where the ``dead_letter`` error handler writes records it skips: ``<application.id>-dlq``."""
    return f"{application_id}{DEAD_LETTER_SUFFIX}"


def replayed_dead_letters_topic(application_id: str) -> str:
    """Where ``brook dlq replay`` records the dead letters it replayed: ``<application.id>-dlq-replayed`` (keyed by
    the dead letter's partition and offset, so it goes with the dead-letter topic it describes)."""
    return f"{dead_letter_topic(application_id)}-replayed"


def shed_topic(application_id: str) -> str:
    """Where ``processing.overflow.shed.divert`` writes the input records shed beyond the rate limit:
    ``<application.id>-shed``."""
    return f"{application_id}-shed"


def alerts_topic(application_id: str) -> str:
    """Where the idle watchdog (``processing.idle.timeout.ms``) writes its ``idle`` and ``resumed`` alerts:
    ``<application.id>-alerts``."""
    return f"{application_id}-alerts"


STREAM_TIME_SUFFIX = "-stream-time"


def stream_time_topic(application_id: str, subtopology: int) -> str:
    """Where the tasks of a stateful sub-topology keep their stream time across restarts:
    ``<application.id>-<subtopology>-stream-time`` (one partition per task, compacted, keyed by task id).
    Not a ``-changelog``: it backs no store, so tools that derive changelogs from store names skip it."""
    return f"{application_id}-{subtopology}{STREAM_TIME_SUFFIX}"


def is_stream_time_topic(application_id: str, topic: str) -> bool:
    """Whether ``topic`` is one of application ``application_id``'s stream-time topics."""
    prefix = f"{application_id}-"
    return topic.startswith(prefix) and topic.endswith(STREAM_TIME_SUFFIX) and \
        topic[len(prefix):-len(STREAM_TIME_SUFFIX)].isdigit()


GENERATION_MARK = ".v"


def generation_name(logical: str, generation: int) -> str:
    """The physical topic of generation ``generation`` of the logical topic ``logical`` (partition scaling's
    migrate mode writes a new generation with the new partition count): generation 1 is the logical name
    itself, so an app that was never scaled keeps its topics; generation ``n`` > 1 is ``<logical>.v<n>``
    (``orders`` -> ``orders.v2``, ``<application.id>-<store>-changelog`` -> ``...-changelog.v2``)."""
    if not isinstance(generation, int) or isinstance(generation, bool) or generation < 1:
        raise ValueError(f"topic generation of {logical!r} must be an integer >= 1, got {generation!r}")
    return logical if generation == 1 else f"{logical}{GENERATION_MARK}{generation}"


def logical_of(physical: str) -> tuple[str, int]:
    """The logical topic and generation a physical name stands for (the inverse of :func:`generation_name`):
    ``orders.v2`` -> (``orders``, 2); a name without a ``.v<n>`` suffix (n >= 2) is generation 1 of itself."""
    base, mark, number = physical.rpartition(GENERATION_MARK)
    if mark and base and number.isdigit() and not number.startswith("0") and int(number) >= 2:
        return base, int(number)
    return physical, 1
