"""Field-level encryption: sensitive fields of JSON values encrypted with AES-256-GCM, each tagged with its key id.

A :class:`FieldEncryption` is a keyring: key ids mapped to keys, one of them the active key that new values are
encrypted with. It encrypts chosen fields of a JSON object (``encrypt_fields``, for ``map_values``) and decrypts
them (``decrypt_fields``), or does both inside a serde (``serde``), so that a value which cannot be decrypted is a
deserialization error and goes down the ``default.deserialization.exception.handler`` path (``dead_letter``: to
``<application.id>-dlq`` with its topic, partition and offset) instead of into the output::

    encryption = FieldEncryption({"k1": "${env:ORDERS_KEY_1}", "k2": "${file:/run/secrets/orders-k2}"},
                                 active_key_id="k2")
    orders.map_values(lambda v: encryption.encrypt_fields(v, ["card_number"])).to("orders-enc")
    builder.stream("orders-enc", value_serde=encryption.serde(["card_number"]))   # decrypted on read

**Wire form.** An encrypted field holds one JSON string in place of its value::

    enc:v1:<key id>:<base64 of nonce (12 bytes) + ciphertext + GCM tag (16 bytes)>

- ``v1``: AES-256-GCM, a random 96-bit nonce per value, standard base64 with padding (RFC 4648 section 4, what
  Spark's ``unbase64`` reads). :data:`ENCRYPTED_VALUE_PATTERN` matches the form (Python and Java regex alike).
- The plaintext is the field value's JSON encoding, so a number decrypts to a number, an object to an object,
  ``null`` to ``None``. Every field present is encrypted, ``null`` included; an absent field stays absent.
- The associated data is ``enc:v1:<key id>:<field>``: a value copied into another field, or re-tagged with
  another key id, fails to decrypt.
- A key id is 1-64 characters of ``A-Z a-z 0-9 . _ -``. A field is a top-level name or a dotted path into nested
  objects (``order.card_number``); a field whose parent object is absent (or not an object) is left alone.

**Keys** are 32 random bytes (AES-256), base64-encoded (:meth:`FieldEncryption.generate_key` makes one), and come
only from ``${env:NAME}`` / ``${file:/path}`` references (:mod:`streaming.config_sources`), never from the config
itself: a literal key is refused. :meth:`FieldEncryption.from_keys` takes keys already in memory (a secrets
manager's client, tests). The key bytes are handed to ``cryptography``'s AESGCM and not kept on any Brook object;
``repr``, error messages, logs and metrics show key ids only. A keyring built from references pickles as its
references (re-resolved where it is unpickled); one built from in-memory keys refuses to pickle.

**Rotation.** Add the new key id, make it active: new values carry the new id, values written before keep the
old id and still decrypt while the old key stays in the keyring. Nothing is rewritten. A reader that has lost a
key id fails on its values with a :class:`~streaming.errors.DecryptionError` naming that key id.

**Errors.** Decryption fails with one :class:`~streaming.errors.DecryptionError` naming the field and the key id
(``key_id`` and ``field`` attributes): the key id is not in the keyring, the key held under that id is not the one
the value was encrypted with (or the value was altered, or moved from another field: GCM authentication fails),
the value is not in the wire form. Messages never hold the value itself (it may be a clear secret).

**What it does not hide**: which fields are present, each value's length (ciphertext = JSON plaintext + 28 bytes,
before base64) and key id. Nonces are random, so the same value encrypts differently each time: compare, join
and group on decrypted values (or on other fields), never on ciphertexts.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

import orjson
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from streaming.config_sources import resolve_references
from streaming.errors import ConfigError, DecryptionError
from streaming.serdes import Serde

WIRE_PREFIX = "enc:v1:"
ENCRYPTED_VALUE_PATTERN = r"^enc:v1:[A-Za-z0-9._-]{1,64}:[A-Za-z0-9+/]+={0,2}$"
"""A regex of the wire form (Python ``re`` and Java alike): quality rules tell encrypted values from clear ones."""

KEY_BYTES = 32
NONCE_BYTES = 12
TAG_BYTES = 16
_ENCRYPTED = re.compile(ENCRYPTED_VALUE_PATTERN)
_KEY_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
_ONE_REFERENCE = re.compile(r"\$\{(?:env|file):[^}]+\}")
_FORM = "enc:v1:<key id>:<base64>"

Fields = str | Iterable[str]


def is_encrypted(value: Any) -> bool:
    """Whether ``value`` is a field value in the wire form (``enc:v1:<key id>:<base64>``). It says nothing about
    which key can decrypt it."""
    return isinstance(value, str) and _ENCRYPTED.match(value) is not None


def encrypted_key_id(value: Any) -> str | None:
    """The key id an encrypted field value was encrypted with (None: not in the wire form). Finds the values
    still under an old key, before that key is retired."""
    return value[len(WIRE_PREFIX):].partition(":")[0] if is_encrypted(value) else None


class FieldEncryption:
    """A keyring: key ids mapped to AES-256 keys, and the active key id new values are encrypted with.

    ``keys`` maps each key id to a ``${env:NAME}`` or ``${file:/path}`` reference whose value is the key's base64
    (32 bytes); a missing variable or unreadable file is a :class:`~streaming.errors.ConfigError` naming the key
    id and the reference. ``active_key_id`` None makes a keyring that only decrypts (a consumer's). See the module
    doc for the wire form, rotation and errors.
    """

    __slots__ = ("_active", "_ciphers", "_references")

    def __init__(self, keys: Mapping[str, str], active_key_id: str | None = None) -> None:
        references = dict(keys)
        for key_id, reference in references.items():
            _check_key_id(key_id)
            if not isinstance(reference, str) or not _ONE_REFERENCE.fullmatch(reference):
                raise ConfigError(f"encryption key '{key_id}' must be a ${{env:NAME}} or ${{file:/path}} reference "
                                  "(keys are never written in config)")
        resolved = resolve_references({_config_key(key_id): ref for key_id, ref in references.items()})
        problem = self._setup({key_id: resolved[_config_key(key_id)] for key_id in references}, active_key_id,
                              references)
        del resolved  # raised from here, the traceback's frames hold no key (a debugger's or error tracker's locals)
        if problem is not None:
            raise ConfigError(problem)

    @classmethod
    def from_keys(cls, keys: Mapping[str, bytes | str], active_key_id: str | None = None) -> FieldEncryption:
        """A keyring of keys already in memory: 32 raw bytes or their base64. It cannot be pickled."""
        for key_id in keys:
            _check_key_id(key_id)
        encryption = cls.__new__(cls)
        problem = encryption._setup(keys, active_key_id, None)
        if problem is not None:
            raise ConfigError(problem)
        return encryption

    @staticmethod
    def generate_key() -> str:
        """A new random key, base64-encoded: what an ``${env:...}`` variable or ``${file:...}`` file holds."""
        return base64.b64encode(os.urandom(KEY_BYTES)).decode()

    def _setup(self, keys: Mapping[str, bytes | str], active_key_id: str | None,
               references: dict[str, str] | None) -> str | None:
        """Build the ciphers; returns what is wrong instead of raising, so that the frame the error is raised from
        holds no key."""
        self._ciphers: dict[str, AESGCM] = {}
        self._active: str | None = None
        self._references: dict[str, str] | None = None
        if not keys:
            return "FieldEncryption needs at least one key"
        if active_key_id is not None and active_key_id not in keys:
            return f"encryption active key id '{active_key_id}' is not one of the keys ({', '.join(sorted(keys))})"
        ciphers = {key_id: _cipher(key_id, key) for key_id, key in keys.items()}
        for problem in ciphers.values():
            if isinstance(problem, str):
                return problem
        self._ciphers = {key_id: cipher for key_id, cipher in ciphers.items() if isinstance(cipher, AESGCM)}
        self._active = active_key_id
        self._references = references
        return None

    @property
    def key_ids(self) -> list[str]:
        """The key ids this keyring holds, sorted."""
        return sorted(self._ciphers)

    @property
    def active_key_id(self) -> str | None:
        """The key id new values are encrypted with (None: this keyring only decrypts)."""
        return self._active

    def encrypt(self, value: Any, field: str) -> str:
        """``value`` (anything JSON can hold) of ``field`` in the wire form, under the active key."""
        key_id = self._active
        if key_id is None:
            raise ConfigError(f"cannot encrypt field '{field}': this FieldEncryption has no active_key_id "
                              f"(it only decrypts, with {', '.join(self.key_ids)})")
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._ciphers[key_id].encrypt(nonce, orjson.dumps(value), _associated_data(key_id, field))
        return f"{WIRE_PREFIX}{key_id}:{base64.b64encode(nonce + sealed).decode()}"

    def decrypt(self, value: Any, field: str) -> Any:
        """The clear value of ``field`` from its wire form. Raises :class:`~streaming.errors.DecryptionError`
        naming the field and the key id when it cannot (see the module doc)."""
        if not isinstance(value, str) or not value.startswith(WIRE_PREFIX):
            raise DecryptionError(f"field '{field}' is not an encrypted value: expected {_FORM}, got "
                                  f"{_describe(value)}", field=field)
        key_id, _, payload = value[len(WIRE_PREFIX):].partition(":")
        if not _KEY_ID.fullmatch(key_id):
            raise DecryptionError(f"field '{field}' is not an encrypted value: expected {_FORM}, got a string "
                                  "without a valid key id", field=field)
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise DecryptionError(f"cannot decrypt field '{field}': key id '{key_id}' is not in this keyring "
                                  f"(it holds {', '.join(self.key_ids)})", key_id=key_id, field=field)
        try:
            sealed = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            sealed = b""
        if len(sealed) <= NONCE_BYTES + TAG_BYTES:
            raise DecryptionError(f"cannot decrypt field '{field}' with key id '{key_id}': the payload is not "
                                  f"base64 of nonce + ciphertext + tag", key_id=key_id, field=field)
        try:
            plain = cipher.decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], _associated_data(key_id, field))
        except InvalidTag:
            raise DecryptionError(f"cannot decrypt field '{field}' with key id '{key_id}': authentication failed "
                                  f"(the key held as '{key_id}' is not the one it was encrypted with, or the value "
                                  f"was altered or moved from another field)", key_id=key_id, field=field) from None
        return orjson.loads(plain)

    def encrypt_fields(self, value: dict[str, Any] | None, fields: Fields) -> dict[str, Any] | None:
        """A copy of JSON object ``value`` with each of ``fields`` present encrypted (``value`` is not changed;
        None, a tombstone, stays None). For ``map_values``."""
        if value is None:
            return None
        if not isinstance(value, dict):
            raise TypeError(f"encrypt_fields needs a JSON object (dict), got {type(value).__name__}")
        for field in _fields(fields):
            value = _replace(value, field.split("."), field, self.encrypt)
        return value

    def decrypt_fields(self, value: dict[str, Any] | None, fields: Fields) -> dict[str, Any] | None:
        """A copy of JSON object ``value`` with each of ``fields`` present decrypted (None stays None). Raises
        :class:`~streaming.errors.DecryptionError` when one cannot be (in ``map_values`` that is a processing
        error, which the ``processing.exception.handler`` decides on; :meth:`serde` makes it a deserialization
        error)."""
        if value is None:
            return None
        if not isinstance(value, dict):
            raise DecryptionError(f"cannot decrypt fields {', '.join(_fields(fields))}: the value is not a JSON "
                                  f"object (it is {_describe(value)})")
        for field in _fields(fields):
            value = _replace(value, field.split("."), field, self.decrypt)
        return value

    def decrypt_found(self, value: Any) -> Any:
        """``value`` with every field in the wire form decrypted, wherever it is in nested objects (a copy; other
        values as they are). For comparing records whose fields were encrypted with random nonces (batch against
        live, an output against an oracle) without naming the fields; raises as :meth:`decrypt` does."""
        return _decrypt_found(self, value, "")

    def serde(self, fields: Fields) -> EncryptedJsonSerde:
        """A JSON serde that encrypts ``fields`` on write and decrypts them on read (see :class:`EncryptedJsonSerde`)."""
        return EncryptedJsonSerde(self, fields)

    def __repr__(self) -> str:
        return f"FieldEncryption(key_ids={self.key_ids!r}, active_key_id={self._active!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        if self._references is None:
            raise TypeError("a FieldEncryption made by from_keys cannot be pickled (it would carry its keys); "
                            "build it from ${env:...} / ${file:...} references, which pickle as references")
        return (FieldEncryption, (self._references, self._active))

    def __copy__(self) -> FieldEncryption:
        return self  # immutable

    def __deepcopy__(self, memo: dict[int, Any]) -> FieldEncryption:
        return self


class EncryptedJsonSerde(Serde[Any]):
    """JSON (orjson) values whose ``fields`` are encrypted on write and decrypted on read by a
    :class:`FieldEncryption`. A value that cannot be decrypted fails ``deserialize`` with a
    :class:`~streaming.errors.DecryptionError`: as a source serde it is a deserialization error, so
    ``default.deserialization.exception.handler=dead_letter`` sends the record's bytes to ``<application.id>-dlq``
    with its topic, partition and offset. Writing needs an active key id."""

    def __init__(self, encryption: FieldEncryption, fields: Fields) -> None:
        self.encryption = encryption
        self.fields = tuple(_fields(fields))

    def serialize(self, obj: Any) -> bytes | None:
        return None if obj is None else orjson.dumps(self.encryption.encrypt_fields(obj, self.fields))

    def deserialize(self, data: bytes | None) -> Any:
        return None if data is None else self.encryption.decrypt_fields(orjson.loads(data), self.fields)

    def __repr__(self) -> str:
        return f"EncryptedJsonSerde({self.encryption!r}, fields={list(self.fields)!r})"


def _config_key(key_id: str) -> str:
    return f"encryption.keys.{key_id}"


def _check_key_id(key_id: Any) -> None:
    if not isinstance(key_id, str) or not _KEY_ID.fullmatch(key_id):
        raise ConfigError(f"encryption key id {key_id!r} must be 1-64 characters of A-Z a-z 0-9 . _ -")


def _cipher(key_id: str, key: bytes | str) -> AESGCM | str:
    """The AES-GCM cipher of one key, or what is wrong with the key (naming the key id, never the key)."""
    if isinstance(key, str):
        try:
            raw = base64.b64decode(key.strip().replace("-", "+").replace("_", "/"), validate=True)
        except (binascii.Error, ValueError):
            return (f"encryption key '{key_id}' is not valid base64 (a key is 32 random bytes, base64-encoded: "
                    "FieldEncryption.generate_key())")
    elif isinstance(key, bytes):
        raw = key
    else:
        return f"encryption key '{key_id}' must be bytes or base64 text, not {type(key).__name__}"
    if len(raw) != KEY_BYTES:
        return (f"encryption key '{key_id}' is {len(raw)} bytes, not {KEY_BYTES} (AES-256): a key is 32 random "
                "bytes, base64-encoded (FieldEncryption.generate_key())")
    return AESGCM(raw)


def _associated_data(key_id: str, field: str) -> bytes:
    return f"{WIRE_PREFIX}{key_id}:{field}".encode()


def _fields(fields: Fields) -> list[str]:
    names = [fields] if isinstance(fields, str) else list(fields)
    for name in names:
        if not isinstance(name, str) or not name or "" in name.split("."):
            raise ValueError(f"not a field name or dotted path: {name!r}")
    return names


def _replace(value: dict[str, Any], path: list[str], field: str, convert: Any) -> dict[str, Any]:
    """``value`` with ``convert(its field at path, field)`` in its place, copying the objects on the path;
    ``value`` itself when the field is absent."""
    head = path[0]
    if head not in value:
        return value
    inner = value[head]
    if len(path) > 1:
        if not isinstance(inner, dict):
            return value
        replaced = _replace(inner, path[1:], field, convert)
        if replaced is inner:
            return value
    else:
        replaced = convert(inner, field)
    return {**value, head: replaced}


def _decrypt_found(encryption: FieldEncryption, value: Any, path: str) -> Any:
    if isinstance(value, dict):
        return {name: _decrypt_found(encryption, inner, f"{path}{name}.") for name, inner in value.items()}
    if isinstance(value, str) and path and _ENCRYPTED.match(value):
        return encryption.decrypt(value, path[:-1])
    return value


def _describe(value: Any) -> str:
    """What a value is, without the value (it may be a clear secret)."""
    if value is None:
        return "null"
    if isinstance(value, str):
        return f"a string of {len(value)} characters" + (" (another wire version)" if value.startswith("enc:") else "")
    return f"a {type(value).__name__}"
