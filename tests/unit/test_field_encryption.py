"""Field-level encryption (streaming.encryption): the wire form, round trips, key rotation, the errors of a wrong or
missing key, keys only from ${env:}/${file:}, and through the test driver: a record that does not decrypt goes to
the dead-letter topic with its offset, and no key material shows in logs, outputs, metrics or errors."""

from __future__ import annotations

import base64
import copy
import logging
import pickle
import re
import traceback
from pathlib import Path
from typing import Any

import orjson
import pytest

from streaming import (
    ConfigError,
    DecryptionError,
    DeserializationError,
    EncryptedJsonSerde,
    FieldEncryption,
    Serdes,
    StreamsBuilder,
    StreamsConfig,
)
from streaming.encryption import ENCRYPTED_VALUE_PATTERN, encrypted_key_id, is_encrypted
from streaming.naming import dead_letter_topic
from streaming.runtime.dead_letters import error_headers
from streaming.testing import TopologyTestDriver
from tests.unit.key_leaks import assert_no_key

K1, K2, ROGUE = (FieldEncryption.generate_key() for _ in range(3))
FIELDS = ["card_number", "customer.email"]
ORDER = {"id": "o1", "amount": 12.5, "card_number": "4111111111111111",
         "customer": {"name": "Ada", "email": "ada@example.com"}}


@pytest.fixture
def keys_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BROOK_TEST_K1", K1)
    monkeypatch.setenv("BROOK_TEST_K2", K2)
    monkeypatch.setenv("BROOK_TEST_ROGUE", ROGUE)


def v1() -> FieldEncryption:
    return FieldEncryption({"k1": "${env:BROOK_TEST_K1}"}, active_key_id="k1")


def v2() -> FieldEncryption:
    """After rotation: k2 is active, k1 is kept to read what was written before."""
    return FieldEncryption({"k1": "${env:BROOK_TEST_K1}", "k2": "${env:BROOK_TEST_K2}"}, active_key_id="k2")


@pytest.mark.usefixtures("keys_in_env")
def test_fields_round_trip_in_the_wire_form_and_the_input_is_not_changed() -> None:
    encryption = v1()
    original = copy.deepcopy(ORDER)
    encrypted = encryption.encrypt_fields(ORDER, FIELDS)
    assert ORDER == original  # a copy: other branches of the topology may hold the same value
    assert encrypted["id"] == "o1" and encrypted["amount"] == 12.5 and encrypted["customer"]["name"] == "Ada"
    for value, clear in ((encrypted["card_number"], ORDER["card_number"]),
                         (encrypted["customer"]["email"], ORDER["customer"]["email"])):
        assert re.fullmatch(ENCRYPTED_VALUE_PATTERN, value) and is_encrypted(value)
        assert value.startswith("enc:v1:k1:") and encrypted_key_id(value) == "k1"
        sealed = base64.b64decode(value.split(":")[3], validate=True)
        assert len(sealed) == 12 + len(orjson.dumps(clear)) + 16  # nonce + JSON plaintext + tag
    assert "4111111111111111" not in orjson.dumps(encrypted).decode()
    assert encryption.decrypt_fields(encrypted, FIELDS) == ORDER
    assert not is_encrypted("4111111111111111") and not is_encrypted(None) and encrypted_key_id(42) is None


@pytest.mark.usefixtures("keys_in_env")
@pytest.mark.parametrize("value", [0, -3.25, "", "héllo ✓", True, None, [1, "two"], {"nested": {"x": [None]}}])
def test_any_json_value_decrypts_to_itself(value: Any) -> None:
    encryption = v1()
    wire = encryption.encrypt(value, "f")
    assert is_encrypted(wire)
    assert encryption.decrypt(wire, "f") == value


@pytest.mark.usefixtures("keys_in_env")
def test_nonces_are_random_so_equal_values_compare_only_decrypted() -> None:
    encryption = v1()
    first, second = encryption.encrypt("same", "f"), encryption.encrypt("same", "f")
    assert first != second
    assert encryption.decrypt(first, "f") == encryption.decrypt(second, "f") == "same"


@pytest.mark.usefixtures("keys_in_env")
def test_decrypt_found_decrypts_every_encrypted_field_by_its_path_and_leaves_the_rest() -> None:
    encryption = v2()
    written = encryption.encrypt_fields(v1().encrypt_fields(ORDER, ["card_number"]), ["customer.email"])
    assert encrypted_key_id(written["card_number"]) == "k1" and encrypted_key_id(written["customer"]["email"]) == "k2"
    assert encryption.decrypt_found(written) == ORDER
    assert encryption.decrypt_found([1, "enc:v1:k1:AAAA"]) == [1, "enc:v1:k1:AAAA"]  # not a field: left alone
    moved = {**written, "other": written["card_number"]}  # a value copied to another field fails to authenticate
    with pytest.raises(DecryptionError, match="field 'other' with key id 'k1'"):
        encryption.decrypt_found(moved)


@pytest.mark.usefixtures("keys_in_env")
def test_absent_fields_and_tombstones_pass_through() -> None:
    encryption = v1()
    assert encryption.encrypt_fields(None, FIELDS) is None and encryption.decrypt_fields(None, FIELDS) is None
    value = {"id": "o2", "customer": "not an object"}
    assert encryption.encrypt_fields(value, FIELDS) == value
    assert encryption.decrypt_fields(value, FIELDS) == value
    nulls = encryption.encrypt_fields({"card_number": None}, "card_number")
    assert is_encrypted(nulls["card_number"])  # null is a value too: encrypted, so its presence is all that shows
    assert encryption.decrypt_fields(nulls, "card_number") == {"card_number": None}


@pytest.mark.usefixtures("keys_in_env")
def test_rotation_old_values_keep_their_key_id_and_still_decrypt() -> None:
    old = v1().encrypt_fields(ORDER, FIELDS)
    rotated = v2()
    new = rotated.encrypt_fields(ORDER, FIELDS)
    assert encrypted_key_id(old["card_number"]) == "k1" and encrypted_key_id(new["card_number"]) == "k2"
    assert rotated.decrypt_fields(old, FIELDS) == rotated.decrypt_fields(new, FIELDS) == ORDER
    # A reader that retired k1 fails on the old values, naming the key id it lacks.
    retired = FieldEncryption({"k2": "${env:BROOK_TEST_K2}"})
    assert retired.decrypt_fields(new, FIELDS) == ORDER
    with pytest.raises(DecryptionError, match=r"field 'card_number': key id 'k1' is not in this keyring "
                                              r"\(it holds k2\)") as missing:
        retired.decrypt_fields(old, FIELDS)
    assert (missing.value.key_id, missing.value.field) == ("k1", "card_number")


@pytest.mark.usefixtures("keys_in_env")
def test_a_wrong_key_an_altered_or_moved_value_fail_naming_the_key_id() -> None:
    value = v2().encrypt_fields(ORDER, FIELDS)
    rogue = FieldEncryption({"k2": "${env:BROOK_TEST_ROGUE}"})  # the right id, the wrong key
    with pytest.raises(DecryptionError, match=r"cannot decrypt field 'card_number' with key id 'k2': "
                                              r"authentication failed") as wrong:
        rogue.decrypt_fields(value, FIELDS)
    assert wrong.value.key_id == "k2" and wrong.value.__cause__ is None and wrong.value.__suppress_context__
    moved = {**value, "card_number": value["customer"]["email"]}  # a value copied into another field
    with pytest.raises(DecryptionError, match="authentication failed"):
        v2().decrypt_fields(moved, FIELDS)
    retagged = {**value, "card_number": value["card_number"].replace(":k2:", ":k1:")}
    with pytest.raises(DecryptionError, match="key id 'k1': authentication failed"):
        v2().decrypt_fields(retagged, FIELDS)
    prefix, payload = value["card_number"].rsplit(":", 1)
    flipped = base64.b64encode(bytes([base64.b64decode(payload)[0] ^ 1]) + base64.b64decode(payload)[1:]).decode()
    with pytest.raises(DecryptionError, match="authentication failed"):
        v2().decrypt(f"{prefix}:{flipped}", "card_number")
    with pytest.raises(DecryptionError, match="not base64 of nonce"):
        v2().decrypt("enc:v1:k2:AAAA", "card_number")


@pytest.mark.usefixtures("keys_in_env")
def test_a_clear_value_where_an_encrypted_one_belongs_fails_without_showing_it() -> None:
    with pytest.raises(DecryptionError, match=r"field 'card_number' is not an encrypted value: expected "
                                              r"enc:v1:<key id>:<base64>, got a string of 16 characters") as clear:
        v1().decrypt_fields({"card_number": "4111111111111111"}, FIELDS)
    assert "4111" not in str(clear.value) and "4111" not in repr(clear.value)
    with pytest.raises(DecryptionError, match="got a int"):
        v1().decrypt(4111111111111111, "card_number")
    with pytest.raises(DecryptionError, match="not a JSON object"):
        v1().decrypt_fields(["4111111111111111"], FIELDS)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="needs a JSON object"):
        v1().encrypt_fields("4111111111111111", FIELDS)  # type: ignore[arg-type]


def test_keys_come_only_from_references_and_errors_name_the_key_id_never_the_key(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("BROOK_TEST_MISSING", raising=False)
    with pytest.raises(ConfigError, match=r"'encryption.keys.k9' refers to \$\{env:BROOK_TEST_MISSING\}, but "
                                          "environment variable BROOK_TEST_MISSING is not set"):
        FieldEncryption({"k9": "${env:BROOK_TEST_MISSING}"})
    with pytest.raises(ConfigError, match=r"encryption key 'k1' must be a \$\{env:NAME\} or \$\{file:/path\} "
                                          "reference") as literal:
        FieldEncryption({"k1": K1})
    with pytest.raises(ConfigError, match="must be a"):
        FieldEncryption({"k1": "prefix-${env:BROOK_TEST_K1}"})
    monkeypatch.setenv("BROOK_TEST_SHORT", base64.b64encode(b"x" * 16).decode())
    with pytest.raises(ConfigError, match="encryption key 'short' is 16 bytes, not 32") as short:
        FieldEncryption({"short": "${env:BROOK_TEST_SHORT}"})
    monkeypatch.setenv("BROOK_TEST_JUNK", "not base64 !!")
    with pytest.raises(ConfigError, match="encryption key 'junk' is not valid base64") as junk:
        FieldEncryption({"junk": "${env:BROOK_TEST_JUNK}"})
    assert junk.value.__cause__ is None and junk.value.__context__ is None
    with pytest.raises(ConfigError, match="key id 'bad:id' must be"):
        FieldEncryption.from_keys({"bad:id": K1})
    with pytest.raises(ConfigError, match="active key id 'k3' is not one of the keys"):
        FieldEncryption.from_keys({"k1": K1}, active_key_id="k3")
    with pytest.raises(ConfigError, match="cannot encrypt field 'f': this FieldEncryption has no active_key_id"):
        FieldEncryption.from_keys({"k1": K1}).encrypt("x", "f")
    key_file = tmp_path / "k1.key"
    key_file.write_text(K1 + "\n")
    from_file = FieldEncryption({"k1": f"${{file:{key_file}}}"}, active_key_id="k1")
    assert FieldEncryption.from_keys({"k1": base64.b64decode(K1)}).decrypt(from_file.encrypt(7, "f"), "f") == 7
    assert_no_key([str(literal.value), str(short.value), str(junk.value)], [K1])
    monkeypatch.setenv("BROOK_TEST_K1", K1)
    with pytest.raises(ConfigError, match="encryption key 'short' is 16 bytes") as among_good_keys:
        FieldEncryption({"k1": "${env:BROOK_TEST_K1}", "short": "${env:BROOK_TEST_SHORT}"})
    # The frames of the error's traceback (what a debugger or an error tracker shows as locals) hold no key.
    frames = traceback.walk_tb(among_good_keys.value.__traceback__)
    assert_no_key([repr(frame.f_locals) for frame, _ in frames], [K1])


def test_the_leak_check_sees_every_form_of_a_key() -> None:
    raw = base64.b64decode(K1)
    for leaked in (f"x{K1}y", K1.rstrip("="), raw.hex(), raw.hex().upper(), repr(raw), b"x" + raw,
                   base64.urlsafe_b64encode(raw).decode()):
        with pytest.raises(AssertionError):
            assert_no_key([leaked], [K1])


@pytest.mark.usefixtures("keys_in_env")
def test_repr_pickle_and_copies_carry_no_key() -> None:
    encryption = v2()
    serde = encryption.serde(FIELDS)
    assert repr(encryption) == "FieldEncryption(key_ids=['k1', 'k2'], active_key_id='k2')"
    assert repr(serde) == ("EncryptedJsonSerde(FieldEncryption(key_ids=['k1', 'k2'], active_key_id='k2'), "
                           "fields=['card_number', 'customer.email'])")
    pickled = pickle.dumps(serde)
    restored = pickle.loads(pickled)  # references pickle as references, resolved again here
    assert restored.deserialize(serde.serialize(ORDER)) == ORDER
    assert copy.deepcopy(encryption) is encryption
    in_memory = FieldEncryption.from_keys({"k1": K1}, active_key_id="k1")
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(in_memory)
    error = DecryptionError("cannot decrypt field 'f' with key id 'k1': x", key_id="k1", field="f")
    again = pickle.loads(pickle.dumps(error))
    assert (str(again), again.key_id, again.field) == (str(error), "k1", "f")
    assert_no_key([repr(encryption), str(encryption), repr(serde), pickled, repr(in_memory),
                   repr(in_memory.serde("f")), repr(vars(serde))], [K1, K2])


# -- through the test driver: the runtime's error path ---------------------------------------------------------

APP = "encryption-app"
DLQ = dead_letter_topic(APP)


def reader_topology(encryption: FieldEncryption, in_serde: bool) -> StreamsBuilder:
    """orders-enc -> decrypted -> orders-clear: by the source serde (a deserialization error when a value does
    not decrypt) or by map_values (a processing error)."""
    builder = StreamsBuilder()
    if in_serde:
        builder.stream("orders-enc", value_serde=encryption.serde(FIELDS)).to("orders-clear",
                                                                                value_serde=Serdes.Json())
    else:
        (builder.stream("orders-enc", value_serde=Serdes.Json())
         .map_values(lambda v: encryption.decrypt_fields(v, FIELDS)).to("orders-clear"))
    return builder


@pytest.mark.usefixtures("keys_in_env")
@pytest.mark.parametrize(("in_serde", "stage"), [(True, "deserialization"), (False, "processing")])
def test_a_record_that_does_not_decrypt_is_dead_lettered_with_its_offset(
        in_serde: bool, stage: str, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> None:
    rotated = v2()
    records = [v1().encrypt_fields(ORDER, FIELDS),                                   # offset 0: old key k1
               rotated.encrypt_fields({**ORDER, "id": "o2"}, FIELDS),                 # 1: new key k2
               FieldEncryption({"k2": "${env:BROOK_TEST_ROGUE}"}, "k2").encrypt_fields(ORDER, FIELDS),  # 2: wrong key
               {**ORDER, "id": "o4"},                                                  # 3: clear, never encrypted
               FieldEncryption.from_keys({"k0": FieldEncryption.generate_key()}, "k0").encrypt_fields(ORDER, FIELDS),
               rotated.encrypt_fields({**ORDER, "id": "o6"}, FIELDS)]                 # 5
    settings = {"application.id": APP, "default.deserialization.exception.handler": "dead_letter",
                "processing.exception.handler": "dead_letter"}
    topology = reader_topology(rotated, in_serde).build()
    with caplog.at_level(logging.DEBUG), TopologyTestDriver(topology, settings) as driver:
        out = driver.create_output_topic("orders-clear", Serdes.String(), Serdes.Json())
        dlq = driver.create_output_topic(DLQ, Serdes.Bytes(), Serdes.Bytes())
        for offset, value in enumerate(records):
            driver.pipe_raw("orders-enc", b"u1", orjson.dumps(value), 1_000 + offset)
        assert [r.value["id"] for r in out.read_records_to_list()] == ["o1", "o2", "o6"]
        letters = dlq.read_records_to_list()
        headers = [error_headers(letter.headers) for letter in letters]
        assert [(h["stage"], h["source.topic"], h["source.offset"]) for h in headers] == \
            [(stage, "orders-enc", "2"), (stage, "orders-enc", "3"), (stage, "orders-enc", "4")]
        assert {h["type"] for h in headers} == {"streaming.errors.DecryptionError"}
        assert "key id 'k2': authentication failed" in headers[0]["message"]
        assert "'card_number' is not an encrypted value" in headers[1]["message"]
        assert "4111" not in headers[1]["message"].split("value bytes=")[0]  # the error names no clear value
        assert "key id 'k0' is not in this keyring" in headers[2]["message"]
        assert [letter.value for letter in letters] == [orjson.dumps(records[i]) for i in (2, 3, 4)]  # the input bytes
        metrics = driver.metrics()
        assert metrics["dead_letter_records"] == 3 and metrics["record_errors"][stage] == 3
        outputs = [str(r.value) for r in out.read_records_to_list()]
    captured = capsys.readouterr()
    assert_no_key([*(r.getMessage() for r in caplog.records), caplog.text, captured.out, captured.err,
                   repr(metrics), str(topology.describe()), *(m for h in headers for m in h.values()),
                   *(repr(letter) for letter in letters), *outputs], [K1, K2, ROGUE])


@pytest.mark.usefixtures("keys_in_env")
def test_log_and_continue_logs_the_key_id_and_no_key(caplog: pytest.LogCaptureFixture) -> None:
    rogue = FieldEncryption({"k1": "${env:BROOK_TEST_ROGUE}"}, "k1").encrypt_fields(ORDER, FIELDS)
    settings = {"application.id": APP, "default.deserialization.exception.handler": "log_and_continue"}
    with caplog.at_level(logging.DEBUG), TopologyTestDriver(reader_topology(v2(), True).build(), settings) as driver:
        driver.pipe_raw("orders-enc", b"u1", orjson.dumps(rogue), 1_000)
        assert driver.metrics()["skipped_records"] == 1
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "offset 0 skipped" in warning and "key id 'k1': authentication failed" in warning
    assert_no_key([caplog.text], [K1, K2, ROGUE])


@pytest.mark.usefixtures("keys_in_env")
def test_with_the_fail_handler_the_error_stops_the_app_naming_the_key_id_and_no_key() -> None:
    rotated = v2()
    builder = reader_topology(rotated, in_serde=True)
    topology = builder.build()
    rogue = FieldEncryption({"k2": "${env:BROOK_TEST_ROGUE}"}, "k2").encrypt_fields(ORDER, FIELDS)
    with TopologyTestDriver(topology, {"application.id": APP}) as driver, \
            pytest.raises(DeserializationError, match=r"key id 'k2': authentication failed.*offset=0") as failed:
        driver.pipe_raw("orders-enc", b"u1", orjson.dumps(rogue), 1_000)
    assert isinstance(failed.value.__cause__, DecryptionError)
    text = "".join(traceback.format_exception(failed.value))
    assert_no_key([text, repr(failed.value), repr(failed.value.__cause__), str(topology.describe()),
                   repr(StreamsConfig({"application.id": APP, "bootstrap.servers": "127.0.0.1:9"}))],
                  [K1, K2, ROGUE])


@pytest.mark.usefixtures("keys_in_env")
def test_a_writer_encrypts_with_map_values_or_its_sink_serde() -> None:
    encryption = v2()
    builder = StreamsBuilder()
    orders = builder.stream("orders", value_serde=Serdes.Json())
    orders.map_values(lambda v: encryption.encrypt_fields(v, FIELDS)).to("orders-enc")
    orders.to("orders-enc-by-serde", value_serde=encryption.serde(FIELDS))
    with TopologyTestDriver(builder.build(), {"application.id": APP}) as driver:
        driver.create_input_topic("orders", Serdes.String(), Serdes.Json()).pipe_input("u1", ORDER, timestamp=1)
        for topic in ("orders-enc", "orders-enc-by-serde"):
            [written] = driver.create_output_topic(topic, Serdes.String(), Serdes.Json()).read_values_to_list()
            assert encrypted_key_id(written["card_number"]) == "k2" and is_encrypted(written["customer"]["email"])
            assert isinstance(EncryptedJsonSerde(encryption, FIELDS).deserialize(orjson.dumps(written)), dict)
            assert encryption.decrypt_fields(written, FIELDS) == ORDER
