"""Field encryption on the embedded broker: an app encrypts with key k1, is restarted after rotation to k2, and its
reader still decrypts the k1 records; records that do not decrypt (a wrong key, an unknown key id, a clear value)
go to ``<app>-dlq`` with their offsets; no key material shows in the logs, the process's output, the metrics or
the dead letters."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import orjson
import pytest
from prometheus_client import generate_latest

from streaming import FieldEncryption, KafkaStreams, Serdes, StreamsBuilder
from streaming.admin import create_topics
from streaming.encryption import encrypted_key_id
from streaming.naming import dead_letter_topic
from streaming.runtime.dead_letters import error_headers
from streaming.runtime.kafka_streams import State
from streaming.testing.generators import GeneratedRecord
from streaming.testing.kafka import produce, read_topic, wait_for
from tests.unit.key_leaks import assert_no_key

pytestmark = pytest.mark.integration
FIELDS = ["card_number", "customer.email"]
K1, K2, ROGUE = (FieldEncryption.generate_key() for _ in range(3))


def order(n: int) -> dict[str, Any]:
    return {"id": f"o{n}", "card_number": f"4111-0000-0000-{n:04d}", "customer": {"email": f"u{n}@example.com"}}


def records(values: list[Any]) -> list[GeneratedRecord]:
    return [GeneratedRecord("u1", value, 1_000 + i) for i, value in enumerate(values)]


def test_rotation_dead_letters_and_no_key_material_on_the_broker(
        bootstrap: str, unique_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("BROOK_TEST_K1", K1)
    monkeypatch.setenv("BROOK_TEST_K2", K2)
    caplog.set_level(logging.DEBUG)
    clear, encrypted, decrypted = f"{unique_name}-orders", f"{unique_name}-orders-enc", f"{unique_name}-orders-out"
    create_topics(bootstrap, {clear: 1, encrypted: 1, decrypted: 1})
    v1 = FieldEncryption({"k1": "${env:BROOK_TEST_K1}"}, active_key_id="k1")
    v2 = FieldEncryption({"k1": "${env:BROOK_TEST_K1}", "k2": "${env:BROOK_TEST_K2}"}, active_key_id="k2")

    def start(encryption: FieldEncryption) -> KafkaStreams:
        """One app: orders -> encrypted (map_values) -> orders-enc -> decrypted (source serde) -> orders-out."""
        builder = StreamsBuilder()
        (builder.stream(clear, value_serde=Serdes.Json())
         .map_values(lambda v: encryption.encrypt_fields(v, FIELDS)).to(encrypted))
        builder.stream(encrypted, value_serde=encryption.serde(FIELDS)).to(decrypted, value_serde=Serdes.Json())
        app = KafkaStreams(builder.build(), {
            "application.id": unique_name, "bootstrap.servers": bootstrap, "commit.interval.ms": 200,
            "state.dir": str(tmp_path / "state"), "default.deserialization.exception.handler": "dead_letter"})
        app.start()
        return app

    def outputs() -> list[Any]:
        return [r.value for r in read_topic(bootstrap, decrypted, Serdes.String(), Serdes.Json(), 1)]

    def dead_letters() -> list[Any]:
        return read_topic(bootstrap, dead_letter_topic(unique_name), Serdes.Bytes(), Serdes.Bytes(), 1)

    app = start(v1)
    try:
        produce(bootstrap, clear, records([order(n) for n in range(3)]), Serdes.String(), Serdes.Json())
        wait_for(lambda: len(outputs()) >= 3 or app.state is State.ERROR, 60, "3 decrypted outputs")
        assert app.state is not State.ERROR, app.exception
    finally:
        app.close(30)

    app = start(v2)  # rotated: k2 encrypts, k1 still decrypts
    try:
        produce(bootstrap, clear, records([order(n) for n in range(3, 6)]), Serdes.String(), Serdes.Json())
        wait_for(lambda: len(outputs()) >= 6 or app.state is State.ERROR, 60, "6 decrypted outputs")
        rogue = FieldEncryption.from_keys({"k2": ROGUE}, "k2")  # the right key id, the wrong key
        unknown = FieldEncryption.from_keys({"k0": FieldEncryption.generate_key()}, "k0")
        poison = [rogue.encrypt_fields(order(6), FIELDS), unknown.encrypt_fields(order(7), FIELDS), order(8)]
        produce(bootstrap, encrypted, records(poison), Serdes.String(), Serdes.Json())  # offsets 6, 7, 8
        wait_for(lambda: len(dead_letters()) >= 3 or app.state is State.ERROR, 60, "3 dead letters")
        produce(bootstrap, clear, records([order(9)]), Serdes.String(), Serdes.Json())
        wait_for(lambda: len(outputs()) >= 7 or app.state is State.ERROR, 60, "the record after the poison")
        assert app.state is State.RUNNING, app.exception
        metrics, exposition = app.metrics(), generate_latest(app.metrics_registry)
    finally:
        app.close(30)

    assert outputs() == [order(n) for n in (0, 1, 2, 3, 4, 5, 9)]  # nothing undecryptable reached the output
    written = [r.value for r in read_topic(bootstrap, encrypted, Serdes.String(), Serdes.Json(), 1)]
    assert [encrypted_key_id(v["card_number"]) for v in written] == ["k1"] * 3 + ["k2"] * 3 + ["k2", "k0", None, "k2"]
    assert [v2.decrypt_fields(v, FIELDS) for v in written[:6]] == [order(n) for n in range(6)]  # old records too
    assert "4111" not in str(written[:6]) and "example.com" not in str(written[:6])

    letters = dead_letters()
    headers = [error_headers(letter.headers) for letter in letters]
    assert [(h["stage"], h["type"], h["source.topic"], h["source.offset"]) for h in headers] == [
        ("deserialization", "streaming.errors.DecryptionError", encrypted, str(offset)) for offset in (6, 7, 8)]
    assert "key id 'k2': authentication failed" in headers[0]["message"]
    assert "key id 'k0' is not in this keyring (it holds k1, k2)" in headers[1]["message"]
    assert "'card_number' is not an encrypted value" in headers[2]["message"]
    assert [letter.value for letter in letters] == [orjson.dumps(value) for value in poison]
    assert metrics["dead_letter_records"] == 3

    captured = capfd.readouterr()
    assert "REBALANCING -> RUNNING" in caplog.text  # the logs were captured
    assert_no_key([caplog.text, *(r.getMessage() for r in caplog.records), captured.out, captured.err,
                   repr(metrics), exposition, *(v for h in headers for v in h.values()),
                   *(repr(letter) for letter in letters), repr(v2), repr(v2.serde(FIELDS))], [K1, K2, ROGUE])
