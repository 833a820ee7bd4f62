"""Dead letters: records the ``dead_letter`` error handler sets aside in ``<application.id>-dlq``.

A dead letter's key and value are the ORIGINAL bytes of the input record that failed (as read from its
source topic, before any deserialization), its timestamp is the input's, and its headers are the
input's headers plus these (values UTF-8 text):

==============================  ============================================================================
``brook.error.stage``           ``deserialization``, ``processing`` or ``production``
``brook.error.type``            the exception's class (``module.Class``) — the cause Brook wrapped, e.g.
                                ``orjson.JSONDecodeError``, ``builtins.KeyError``, ``cimpl.KafkaException``
``brook.error.message``         the error message (Brook's, naming task, node, topic, partition, offset),
                                at most 2,000 characters
``brook.error.source.topic``    the input record's topic, ``.source.partition``, ``.source.offset``,
``brook.error.source.*``        ``.source.timestamp`` (epoch ms) — absent when there was no input record
``brook.error.task``            the task id (``<subtopology>_<partition>``)
``brook.error.application.id``  the application
``brook.error.record``          ``input`` (key/value are the input record's bytes), ``output`` (the
                                serialized output's) or ``none`` (no key or value: see below)
``brook.error.output.topic``    production errors: the output topic, and ``.output.partition`` (-1: the
``brook.error.output.*``        partitioner's choice)
==============================  ============================================================================

A production error raised while an input record is processed (the producer refuses the output at send
time, e.g. larger than ``producer.message.max.bytes``) keeps the input record (``record=input``). One
reported by the broker after the input was processed (e.g. the topic's ``max.message.bytes``), and one of
an output a cache flush or a punctuator wrote, keep the serialized OUTPUT key and value (``record=output``):
the ``source.*`` headers name the input record of a cache flush's output (the one that last wrote the
cached entry); a punctuator's output has none, and a delivery report knows only the output (its message
names the input records it may come from).

A processing error of a record a cache flush or a punctuator forwarded has no input record's bytes to keep
(Kafka Streams' cache entries keep none either): its dead letter has no key and no value
(``record=none``); its ``source.*`` headers name the input record that last wrote the cached entry, and
are absent for a punctuator's records. The entry itself is in the store (the flush wrote it before
forwarding it).

A dead letter too large for the producer (``producer.message.max.bytes``: a record refused for its size, whose
bytes the dead letter would carry) is written without the record's key, value and headers (``record=none``,
the message says so), so the app goes on; its ``source.*`` headers still say where the input record is.

``brook dlq replay APP`` puts dead letters back: an ``input`` dead letter into its source topic and
partition, an ``output`` one into its output topic, with the original headers (``brook.error.*``
removed) and timestamp. A ``none`` dead letter is not replayable (re-injecting the input record it names
would count it twice in the aggregate that already holds it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from streaming.errors import ProductionError
from streaming.runtime.error_handlers import PRODUCTION, ErrorContext

PREFIX = "brook.error."
STAGE = PREFIX + "stage"
TYPE = PREFIX + "type"
MESSAGE = PREFIX + "message"
SOURCE_TOPIC = PREFIX + "source.topic"
SOURCE_PARTITION = PREFIX + "source.partition"
SOURCE_OFFSET = PREFIX + "source.offset"
SOURCE_TIMESTAMP = PREFIX + "source.timestamp"
TASK = PREFIX + "task"
APPLICATION = PREFIX + "application.id"
RECORD = PREFIX + "record"
OUTPUT_TOPIC = PREFIX + "output.topic"
OUTPUT_PARTITION = PREFIX + "output.partition"
MAX_MESSAGE_CHARS = 2000

Send = Callable[[str, bytes | None, bytes | None, int, Any, int], None]


def error_type(error: BaseException) -> str:
    """``module.Class`` of the error's cause (what Brook wrapped), else of the error itself."""
    cause = error.__cause__ if error.__cause__ is not None else error
    kind = type(cause)
    return f"{kind.__module__}.{kind.__qualname__}"


def dead_letter(application_id: str, context: ErrorContext, error: BaseException, now_ms: int | None = None,
                with_record: bool = True) -> tuple[bytes | None, bytes | None, int, list[tuple[str, bytes]]]:
    """The dead letter of a failed record: ``(key, value, timestamp, headers)``; without the record's key, value
    and headers when not ``with_record`` (they did not fit the producer's limit)."""
    message = str(error)[:MAX_MESSAGE_CHARS]
    if not with_record:
        message += "; this dead letter holds no key, value or headers of the record: they did not fit " \
                   "producer.message.max.bytes"
    text: dict[str, Any] = {STAGE: context.stage, TYPE: error_type(error), MESSAGE: message,
                            APPLICATION: application_id}
    if context.task_id is not None:
        text[TASK] = context.task_id
    if context.topic is not None:
        text.update({SOURCE_TOPIC: context.topic, SOURCE_PARTITION: context.partition,
                     SOURCE_OFFSET: context.offset, SOURCE_TIMESTAMP: context.timestamp})
    if context.stage == PRODUCTION:
        text.update({OUTPUT_TOPIC: context.output_topic, OUTPUT_PARTITION: context.output_partition})
    has_input = context.has_input and with_record
    text[RECORD] = record_kind(context) if with_record else "none"
    headers = [(k, v) for k, v in context.headers if not k.startswith(PREFIX)] if has_input else []
    headers += [(k, str(v).encode()) for k, v in text.items() if v is not None]
    timestamp = context.timestamp if context.timestamp is not None and context.timestamp >= 0 \
        else (now_ms if now_ms is not None else int(time.time() * 1000))
    if has_input:
        return context.key, context.value, timestamp, headers
    if not with_record:
        return None, None, timestamp, headers
    return context.output_key, context.output_value, timestamp, headers


def record_kind(context: ErrorContext) -> str:
    """What a dead letter's key and value are: ``input``, ``output`` or ``none`` (see the module doc)."""
    if context.has_input:
        return "input"
    return "output" if context.stage == PRODUCTION else "none"


class DeadLetterWriter:
    """Writes dead letters through the record collector's ``send`` (the same producer as every output, so
    a commit covers them: they are acknowledged before the offsets past their record are committed)."""

    def __init__(self, application_id: str, topic: str, send: Send) -> None:
        self._application_id = application_id
        self.topic = topic
        self._send = send

    def __call__(self, context: ErrorContext, error: BaseException) -> None:
        key, value, timestamp, headers = dead_letter(self._application_id, context, error)
        try:
            self._send(self.topic, key, value, timestamp, headers, -1)
        except ProductionError as refused:
            if "MSG_SIZE_TOO_LARGE" not in str(refused) or (key is None and value is None):
                raise
            # The record's own bytes made the dead letter too large (an output or input refused for its size).
            key, value, timestamp, headers = dead_letter(self._application_id, context, error, with_record=False)
            self._send(self.topic, key, value, timestamp, headers, -1)


def error_headers(headers: list[tuple[str, bytes | None]] | None) -> dict[str, str]:
    """The ``brook.error.*`` headers of a dead letter, by short name (``stage``, ``source.topic``, ...)."""
    return {k[len(PREFIX):]: (v or b"").decode(errors="replace") for k, v in headers or [] if k.startswith(PREFIX)}


def original_headers(headers: list[tuple[str, bytes | None]] | None) -> list[tuple[str, bytes | None]]:
    """A dead letter's headers without Brook's ``brook.error.*`` ones (what the record carried)."""
    return [(k, v) for k, v in headers or [] if not k.startswith(PREFIX)]
