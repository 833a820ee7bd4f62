"""Poison records on the embedded broker: every kind ends in ``<app>-dlq`` with the right headers while the
good records flow on; ``brook dlq replay`` puts them back, and a fixed app then processes them; a second
replay replays nothing; ``log_and_continue`` counts its skips."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from streaming import KafkaStreams, Serdes, StreamsBuilder
from streaming.admin import create_topics
from streaming.naming import dead_letter_topic
from streaming.runtime.dead_letters import error_headers
from streaming.runtime.kafka_streams import State
from streaming.serdes import JsonSerde
from streaming.testing.generators import GeneratedRecord
from streaming.testing.kafka import committed_offsets, produce, read_topic, wait_for

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 2
TRACE = [("trace", b"t-1")]  # headers of the poison records, which dead letters and replays keep
MAX_BYTES = 2000  # producer.message.max.bytes of the app: a larger output is refused at send time


def brook(*args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", "streaming.cli.main", *args], cwd=ROOT, capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return result


def strict(value: dict[str, Any]) -> dict[str, Any]:
    """The first version: ``n`` must be a number, ``boom`` raises, ``pad`` makes the output that long."""
    if value.get("boom"):
        raise ValueError(f"order {value['id']} asked to fail")
    return {"id": value["id"], "double": value["n"] * 2, "pad": "x" * value.get("pad", 0)}


def fixed(value: dict[str, Any]) -> dict[str, Any]:
    """The fix: numbers from text, no failure on ``boom``, padding capped."""
    return {"id": value["id"], "double": int(value.get("n") or 0) * 2, "pad": "x" * min(value.get("pad", 0), 100)}


class LenientJson(JsonSerde):
    """The fixed input serde: a value that is not JSON becomes ``{"id": <the text>, "n": 0}``."""

    def deserialize(self, data: bytes | None) -> Any:
        try:
            return super().deserialize(data)
        except ValueError:
            return {"id": (data or b"").decode(errors="replace"), "n": 0}


def run(bootstrap: str, app_id: str, source: str, sink: str, mapper: Any, value_serde: Any, expect_outputs: int,
        **extra: Any) -> dict[str, Any]:
    builder = StreamsBuilder()
    builder.stream(source, value_serde=value_serde).map_values(mapper).to(sink)
    app = KafkaStreams(builder.build(), {"application.id": app_id, "bootstrap.servers": bootstrap,
                                          "commit.interval.ms": 200, **extra})
    app.start()
    try:
        wait_for(lambda: len(read_topic(bootstrap, sink, Serdes.String(), Serdes.Json(), PARTITIONS)) >= expect_outputs
                 or app.state is State.ERROR, 60, f"{expect_outputs} outputs")
        assert app.state is not State.ERROR, app.exception
        wait_for(lambda: sum(committed_offsets(bootstrap, app_id, source, PARTITIONS).values()) >= inputs_of(
            bootstrap, source), 30, "the offsets committed to the end")
        return app.metrics()
    finally:
        app.close(30)


def inputs_of(bootstrap: str, topic: str) -> int:
    return len(read_topic(bootstrap, topic, Serdes.String(), Serdes.Bytes(), PARTITIONS))


def test_poison_records_of_every_kind_end_in_the_dead_letter_topic_and_replay_after_a_fix(
        bootstrap: str, unique_name: str) -> None:
    source, sink, app_id = f"{unique_name}-orders", f"{unique_name}-out", unique_name
    create_topics(bootstrap, {source: PARTITIONS, sink: PARTITIONS})
    good = [GeneratedRecord(f"u{i}", json.dumps({"id": f"g{i}", "n": i}).encode(), 1_000 + i) for i in range(40)]
    poison = {
        "bad-json": GeneratedRecord("u1", b'{"id": "bad-json", "n": ', 2_001, TRACE),
        "wrong-type": GeneratedRecord("u2", json.dumps({"id": "wrong-type", "n": None}).encode(), 2_002, TRACE),
        "boom": GeneratedRecord("u3", json.dumps({"id": "boom", "n": 1, "boom": True}).encode(), 2_003, TRACE),
        "oversized": GeneratedRecord("u4", json.dumps({"id": "oversized", "n": 1, "pad": 5_000}).encode(), 2_004, TRACE),
    }
    produce(bootstrap, source, [*good[:20], *poison.values(), *good[20:]], Serdes.String(), Serdes.Bytes())
    handlers = {"default.deserialization.exception.handler": "dead_letter",
                "processing.exception.handler": "dead_letter", "production.exception.handler": "dead_letter",
                "producer.message.max.bytes": MAX_BYTES}

    metrics = run(bootstrap, app_id, source, sink, strict, Serdes.Json(), len(good), **handlers)

    outputs = read_topic(bootstrap, sink, Serdes.String(), Serdes.Json(), PARTITIONS)
    assert sorted(r.value["id"] for r in outputs) == sorted(f"g{i}" for i in range(40))
    letters = read_topic(bootstrap, dead_letter_topic(app_id), Serdes.String(), Serdes.Bytes(), 1)
    by_id = {}
    for letter in letters:
        errors = error_headers(letter.headers)
        original = next(name for name, record in poison.items() if record.value == letter.value)
        by_id[original] = errors
        record = poison[original]
        assert (letter.key, letter.timestamp) == (record.key, record.timestamp)
        assert ("trace", b"t-1") in letter.headers
        assert errors["source.topic"] == source and errors["record"] == "input"
        assert int(errors["source.timestamp"]) == record.timestamp
        assert errors["application.id"] == app_id
    assert sorted(by_id) == sorted(poison) and len(letters) == len(poison)  # each poison record once
    assert len(outputs) + len(letters) == inputs_of(bootstrap, source)  # every input: output or dead letter
    assert (by_id["bad-json"]["stage"], by_id["bad-json"]["type"]) == ("deserialization", "orjson.JSONDecodeError")
    assert (by_id["wrong-type"]["stage"], by_id["wrong-type"]["type"]) == ("processing", "builtins.TypeError")
    assert (by_id["boom"]["stage"], by_id["boom"]["type"]) == ("processing", "builtins.ValueError")
    assert "order boom asked to fail" in by_id["boom"]["message"]
    assert by_id["oversized"]["stage"] == "production" and by_id["oversized"]["output.topic"] == sink
    assert "MSG_SIZE_TOO_LARGE" in by_id["oversized"]["message"] or "too large" in by_id["oversized"]["message"]
    assert metrics["dead_letter_records"] == 4 and metrics["skipped_records"] == 0
    assert metrics["record_errors"] == {"deserialization": 1, "processing": 2, "production": 1}

    dry = brook("dlq", "replay", app_id, "-b", bootstrap, "--dry-run", "--filter", "stage=deserialization")
    assert dry.stdout.count("would replay") == 1 and source in dry.stdout
    assert "would replay 1 dead letters" in dry.stderr and "3 not matching the filter" in dry.stderr
    assert inputs_of(bootstrap, source) == len(good) + len(poison)  # a dry run writes nothing

    first = brook("dlq", "replay", app_id, "-b", bootstrap, "--filter", "type=TypeError")
    assert "replayed 1 dead letters" in first.stderr
    rest = brook("dlq", "replay", app_id, "-b", bootstrap)
    assert "replayed 3 dead letters" in rest.stderr and "1 replayed before" in rest.stderr
    again = brook("dlq", "replay", app_id, "-b", bootstrap)
    assert "replayed 0 dead letters" in again.stderr and "4 replayed before" in again.stderr
    replayed = read_topic(bootstrap, source, Serdes.String(), Serdes.Bytes(), PARTITIONS)[-4:]
    assert len(read_topic(bootstrap, source, Serdes.String(), Serdes.Bytes(), PARTITIONS)) == len(good) + 8
    assert all(not any(k.startswith("brook.error.") for k, _ in r.headers) for r in replayed)

    run(bootstrap, app_id, source, sink, fixed, LenientJson(), len(good) + 4, **handlers)
    ids = sorted(r.value["id"] for r in read_topic(bootstrap, sink, Serdes.String(), Serdes.Json(), PARTITIONS))
    assert ids == sorted([*(f"g{i}" for i in range(40)), '{"id": "bad-json", "n": ', "wrong-type", "boom",
                          "oversized"])


def test_log_and_continue_counts_its_skips(bootstrap: str, unique_name: str) -> None:
    source, sink = f"{unique_name}-in", f"{unique_name}-out"
    create_topics(bootstrap, {source: PARTITIONS, sink: PARTITIONS})
    records = [GeneratedRecord(f"u{i}", json.dumps({"id": f"g{i}", "n": i}).encode(), 1_000 + i) for i in range(10)]
    records += [GeneratedRecord("u1", b"not json", 2_000), GeneratedRecord("u2", b'{"id": "x", "n": "y"}', 2_001)]
    produce(bootstrap, source, records, Serdes.String(), Serdes.Bytes())
    metrics = run(bootstrap, unique_name, source, sink, lambda v: {"id": v["id"], "double": v["n"] + 1},
                  Serdes.Json(), 10, **{"default.deserialization.exception.handler": "log_and_continue",
                                        "processing.exception.handler": "log_and_continue"})
    assert metrics["skipped_records"] == 2 and metrics["dead_letter_records"] == 0
    assert metrics["record_errors"] == {"deserialization": 1, "processing": 1, "production": 0}
    assert len(read_topic(bootstrap, sink, Serdes.String(), Serdes.Json(), PARTITIONS)) == 10
