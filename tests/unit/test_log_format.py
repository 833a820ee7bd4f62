"""``--log-format json``: one JSON object per log record, secrets never written."""

from __future__ import annotations

import json
import logging

from streaming.cli.logs import JsonFormatter


def record(message: str, *args: object, exc: BaseException | None = None, **extra: object) -> logging.LogRecord:
    made = logging.LogRecord("brook.worker", logging.WARNING, __file__, 1, message, args,
                             (type(exc), exc, None) if exc is not None else None)
    made.__dict__.update(extra)
    return made


def test_a_record_is_one_json_line_with_the_standard_and_the_added_fields() -> None:
    formatter = JsonFormatter({"application_id": "orders"})
    line = formatter.format(record("worker %s started", "orders", partition=3))
    assert "\n" not in line
    parsed = json.loads(line)
    assert parsed["message"] == "worker orders started" and parsed["level"] == "WARNING"
    assert parsed["logger"] == "brook.worker" and parsed["thread"] == "MainThread"
    assert parsed["application_id"] == "orders" and parsed["partition"] == 3
    assert parsed["time"].endswith("+00:00")


def test_extra_fields_named_like_secrets_are_redacted() -> None:
    line = JsonFormatter().format(record("login", sasl_password="hunter2", config={"sasl.password": "hunter2"}))
    assert "hunter2" not in line
    assert json.loads(line)["sasl_password"] == "***"


def test_an_exception_keeps_its_traceback_in_one_field() -> None:
    try:
        raise ValueError("boom")
    except ValueError as exc:
        parsed = json.loads(JsonFormatter().format(record("failed", exc=exc)))
    assert "ValueError: boom" in parsed["exception"]
