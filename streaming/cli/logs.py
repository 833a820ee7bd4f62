"""How the ``brook`` command logs: human text (default) or one JSON object per line (``--log-format json``,
``BROOK_LOG_FORMAT=json``), for log shippers.

A JSON line holds ``time`` (ISO 8601, UTC), ``level``, ``logger``, ``message``, ``thread``, the fields
:func:`set_log_fields` added (the worker adds ``application_id``), any ``extra=`` fields of the call, and
``exception`` with the traceback when there is one. Text lines carry a traceback only when debugging
(``--debug``, ``BROOK_DEBUG=1``); otherwise a line that logged an exception ends with its type and first line.
Extra fields named like secrets (``streaming.config``'s
rule) are written as ``***``; messages themselves never carry secret values (the runtime logs redacted
config only).
"""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime
from typing import Any

import orjson

from streaming.config import redact

TEXT = "text"
JSON = "json"
LOG_FORMATS = (TEXT, JSON)
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_OURS = "brook_handler"  # marks the handler configure_logging made

# Attributes every LogRecord has: what is not among them came from ``extra=``.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


def debugging() -> bool:
    """Whether tracebacks are wanted: ``--debug`` or ``BROOK_DEBUG`` set to anything but ``0``."""
    return os.environ.get("BROOK_DEBUG", "") not in ("", "0")


class TextFormatter(logging.Formatter):
    """:data:`TEXT_FORMAT` lines; a logged exception's traceback only when :func:`debugging`."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        if not record.exc_info or debugging():
            return super().format(record)
        exc = record.exc_info[1]
        quiet = logging.makeLogRecord({**vars(record), "exc_info": None, "exc_text": None})
        line = super().format(quiet)
        first = str(exc).splitlines()[0] if exc is not None and str(exc) else ""
        return line if first and first in line else f"{line} ({type(exc).__name__}{': ' + first if first else ''})"


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def __init__(self, fields: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.fields = dict(fields or {})

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "thread": record.threadName,
            **self.fields,
        }
        line.update(redact({k: v for k, v in vars(record).items() if k not in _STANDARD}))
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()


def configure_logging(level: int, log_format: str) -> None:
    """Log to stderr at ``level`` in ``log_format`` (``text`` or ``json``). Called again, it switches the
    format of the handler it made; handlers others installed (a test's log capture) are left alone."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"unknown log format {log_format!r}: use {' or '.join(LOG_FORMATS)}")
    formatter = JsonFormatter() if log_format == JSON else TextFormatter()
    root = logging.getLogger()
    ours = [handler for handler in root.handlers if getattr(handler, _OURS, False)]
    if ours:
        for handler in ours:
            handler.setFormatter(formatter)
        root.setLevel(level)
        return
    handler = logging.StreamHandler()
    setattr(handler, _OURS, True)
    handler.setFormatter(formatter)
    logging.basicConfig(level=level, handlers=[handler])  # a no-op when the root logger has handlers


def logs_json() -> bool:
    """Whether logging is set up to write JSON lines."""
    return any(isinstance(h.formatter, JsonFormatter) for h in logging.getLogger().handlers)


def set_log_fields(**fields: Any) -> None:
    """Add ``fields`` to every JSON log line from now on (no effect on text logs)."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler.formatter, JsonFormatter):
            handler.formatter.fields.update(redact(fields))
