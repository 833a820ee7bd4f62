"""Record error handlers: what happens to a record that cannot be deserialized, processed or produced.

Configured per stage — ``default.deserialization.exception.handler``, ``processing.exception.handler``,
``production.exception.handler`` — by name or as a callable:

* ``fail`` (default): the error stops the stream thread; nothing is committed past the record, so it is
  read again after the fix (at-least-once).
* ``log_and_continue``: one warning line naming the topic, partition, offset and error; the record is
  skipped and counted (``skipped_records``).
* ``dead_letter``: the record is written to ``<application.id>-dlq`` with ``brook.error.*`` headers
  (:mod:`streaming.runtime.dead_letters`), counted (``dead_letter_records``), and processing goes on.
* a callable ``handler(context: ErrorContext, error: Exception) -> "continue" | "fail"`` (or its
  ``module:function`` name): ``continue`` skips the record (counted and logged as ``log_and_continue``).

A skipped record's partial effects stay: what the topology wrote or stored before the error is kept,
as in Kafka Streams. Changelog writes never go to a handler (skipping one would make the store and its
changelog disagree): their failure always stops the thread.

Records no input record is processing reach the processing handler too, as Kafka Streams routes every
processor call through it (KIP-1033: ``ProcessorNode.process``, ``StreamTask.punctuate``): a record a
cache flush forwards (its context names the input record that last wrote the cached entry, as
``LRUCacheEntry`` keeps it), a record a punctuator forwards, and a punctuator's own failure (no input
record: no topic, partition or offset, the punctuation's time as timestamp — ``ErrorHandlerContext``).
Skipping one skips that record downstream (or that punctuation); the flush or the punctuator goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from streaming.errors import StreamsError
from streaming.runtime.record_source import RecordSource

log = logging.getLogger(__name__)

DESERIALIZATION = "deserialization"
PROCESSING = "processing"
PRODUCTION = "production"
STAGES = (DESERIALIZATION, PROCESSING, PRODUCTION)
HANDLER_KEYS = {
    DESERIALIZATION: "default.deserialization.exception.handler",
    PROCESSING: "processing.exception.handler",
    PRODUCTION: "production.exception.handler",
}

FAIL = "fail"
LOG_AND_CONTINUE = "log_and_continue"
DEAD_LETTER = "dead_letter"
HANDLER_NAMES = (FAIL, LOG_AND_CONTINUE, DEAD_LETTER)
CONTINUE = "continue"  # what a user handler returns to skip the record (or FAIL to stop)


@dataclass(frozen=True)
class ErrorContext:
    """What a handler learns about the record that failed.

    ``topic``/``partition``/``offset``/``timestamp``/``key``/``value``/``headers`` describe the input record
    (with its original bytes when ``has_input``). A record a cache flush forwards, and an output it sends, name
    the input record that last wrote the cached entry, without its bytes (as Kafka Streams, whose cache entries
    keep no raw source record). A punctuation, and what a punctuator forwards or sends, has no input record:
    those are None, and ``timestamp`` is the punctuation's time (Kafka Streams' ``ErrorHandlerContext``); so
    has an output a delivery report says failed after it was sent (the report knows only the output: the error
    message names the input records it may come from). A production error also names the output
    (``output_topic``, ``output_partition``, and the serialized ``output_key``/``output_value``).
    """

    stage: str
    task_id: str | None
    topic: str | None = None
    partition: int | None = None
    offset: int | None = None
    timestamp: int | None = None
    key: bytes | None = None
    value: bytes | None = None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    output_topic: str | None = None
    output_partition: int | None = None
    output_key: bytes | None = None
    output_value: bytes | None = None
    has_input: bool = False  # key, value and headers are the input record's (else only its coordinates)

    @classmethod
    def of_message(cls, stage: str, task_id: str | None, message: Any, timestamp: int | None = None,
                   **fields: Any) -> ErrorContext:
        """The context of a consumed (or test-driver) ``message``, of a :class:`RecordSource` (the input record
        without its bytes), or with ``message`` None of no input record, at ``timestamp`` (a punctuation's time)."""
        if message is None:
            return cls(stage, task_id, timestamp=timestamp, **fields)
        if isinstance(message, RecordSource):
            return cls(stage, task_id, message.topic(), message.partition(), message.offset(), message.timestamp_ms,
                       headers=list(message.headers() or []), **fields)
        return cls(stage, task_id, message.topic(), message.partition(), message.offset(), message.timestamp()[1],
                   message.key(), message.value(), list(message.headers() or []), **fields, has_input=True)

    def where(self) -> str:
        if self.topic is not None:
            return f"topic {self.topic} partition {self.partition} offset {self.offset}"
        if self.output_topic is not None:
            return f"output topic {self.output_topic} partition {self.output_partition} (no input record)"
        return f"time {self.timestamp} (no input record)"


Handler = Callable[[ErrorContext, Exception], str]
DeadLetterWriter = Callable[[ErrorContext, Exception], None]


class RecordErrorHandlers:
    """The three handlers of one stream thread (or test driver) and the counters of what they skipped.

    :meth:`handle` returns when the record is to be skipped, and raises ``error`` when it is to stop the
    thread; :meth:`decided` then says so of that error, so the layers it goes up through do not hand it to a
    handler again (Kafka Streams' ``FailedProcessingException``). Counters survive task migration (they
    belong to the thread, not the task).
    """

    def __init__(self, handlers: dict[str, str | Handler], dead_letters: DeadLetterWriter | None) -> None:
        self._handlers = handlers
        self._dead_letters = dead_letters
        self.skipped = 0  # records skipped by log_and_continue or a user handler's "continue"
        self.dead_lettered = 0  # records written to the dead-letter topic
        self.by_stage = dict.fromkeys(STAGES, 0)  # records skipped or dead-lettered, per stage
        self.by_action: dict[tuple[str, str], int] = {}  # (stage, "skipped" | "dead_letter") -> records
        self._failed: BaseException | None = None  # the last error a handler chose to stop on

    def fails_on(self, stage: str) -> bool:
        """Whether ``stage``'s errors always stop the thread (the ``fail`` handler)."""
        return self._handlers[stage] == FAIL

    def decided(self, error: BaseException) -> bool:
        """Whether ``error`` is what :meth:`handle` raised to stop the thread (it must not be handled again)."""
        return error is self._failed

    def handle(self, context: ErrorContext, error: Exception) -> None:
        """Skip the record (log, dead-letter, count) or raise ``error``, as ``context.stage``'s handler says."""
        try:
            self._handle(context, error)
        except BaseException as stop:
            self._failed = stop
            raise

    def _handle(self, context: ErrorContext, error: Exception) -> None:
        handler = self._handlers[context.stage]
        if handler == FAIL:
            raise error
        if handler == DEAD_LETTER:
            if self._dead_letters is None:
                raise StreamsError(f"{HANDLER_KEYS[context.stage]}=dead_letter but nothing writes dead letters "
                                   f"here") from error
            self._dead_letters(context, error)
            self.dead_lettered += 1
            self._count(context.stage, DEAD_LETTER)
            log.warning("%s error at %s sent to the dead-letter topic: %s", context.stage, context.where(), error)
            return
        if handler != LOG_AND_CONTINUE:
            decision = self._ask(handler, context, error)
            if decision == FAIL:
                raise error
        self.skipped += 1
        self._count(context.stage, "skipped")
        log.warning("%s error at %s skipped (%s=%s): %s", context.stage, context.where(),
                    HANDLER_KEYS[context.stage], handler if isinstance(handler, str) else _name(handler), error)

    def _count(self, stage: str, action: str) -> None:
        self.by_stage[stage] += 1
        self.by_action[(stage, action)] = self.by_action.get((stage, action), 0) + 1

    def _ask(self, handler: Handler, context: ErrorContext, error: Exception) -> str:
        try:
            decision = handler(context, error)
        except Exception as exc:  # noqa: BLE001 - a user's handler may raise anything; it is reported, not lost
            raise StreamsError(f"{HANDLER_KEYS[context.stage]} {_name(handler)} raised while handling the {context.stage} "
                               f"error at {context.where()}: {exc!r}") from error
        if decision not in (CONTINUE, FAIL):
            raise StreamsError(f"{HANDLER_KEYS[context.stage]} {_name(handler)} returned {decision!r} for the "
                               f"{context.stage} error at {context.where()}; it must return 'continue' or "
                               f"'fail'") from error
        return decision

    def metrics(self) -> dict[str, Any]:
        return {"skipped_records": self.skipped, "dead_letter_records": self.dead_lettered,
                "record_errors": dict(self.by_stage)}


def resolve_handler(value: Any) -> str | Handler:
    """A handler from a config value: ``fail``, ``log_and_continue``, ``dead_letter``, a callable, or the
    ``module:function`` name of one. Raises ValueError naming the allowed values."""
    if value in HANDLER_NAMES:
        return str(value)
    if callable(value):
        return value
    if isinstance(value, str) and ":" in value:
        import importlib

        module, _, attr = value.partition(":")
        try:
            found = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise ValueError(f"cannot load handler {value!r}: {exc}") from None
        if not callable(found):
            raise ValueError(f"{value!r} is not callable")
        return found
    raise ValueError(f"must be one of {', '.join(HANDLER_NAMES)}, a callable (context, exception) -> "
                     f"'continue' | 'fail', or the 'module:function' name of one")


def merge_metrics(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Sum :meth:`RecordErrorHandlers.metrics` of several threads."""
    stages = {stage: sum(p["record_errors"][stage] for p in parts) for stage in STAGES}
    return {"skipped_records": sum(p["skipped_records"] for p in parts),
            "dead_letter_records": sum(p["dead_letter_records"] for p in parts), "record_errors": stages}


def _name(handler: Any) -> str:
    return f"{getattr(handler, '__module__', '?')}:{getattr(handler, '__qualname__', repr(handler))}"


def fail_always() -> RecordErrorHandlers:
    """Handlers that fail on every error (a task built without the thread's handlers, e.g. a standby)."""
    return RecordErrorHandlers(dict.fromkeys(STAGES, FAIL), None)


def configured_handlers(config: Any, dead_letters: DeadLetterWriter | None) -> RecordErrorHandlers:
    """The three handlers ``config`` (a StreamsConfig) names."""
    return RecordErrorHandlers({stage: config[key] for stage, key in HANDLER_KEYS.items()}, dead_letters)


def uses_dead_letters(config: Any) -> bool:
    """Whether any of ``config``'s handlers is ``dead_letter`` (then ``<application.id>-dlq`` is needed)."""
    return any(config[key] == DEAD_LETTER for key in HANDLER_KEYS.values())
