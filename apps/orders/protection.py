"""What the orders pipeline encrypts, and the keyring it encrypts with.

Every output that carries a sensitive field carries it encrypted (:mod:`streaming.encryption`'s wire form,
``enc:v1:<key id>:<base64>``): a service holding the key reads it with ``FieldEncryption.decrypt_fields`` or
``FieldEncryption.serde``, nothing else can. The card number is also kept masked (``card_masked``) where a person
reads the record. :data:`ENCRYPTED_FIELDS` lists them per topic; the input topics (``orders``, ``users``) are the
order service's and hold them in clear.

The keyring comes from ``apps/orders/encryption.yaml`` (``BROOK_ORDERS_ENCRYPTION`` names another file): key ids
mapped to ``${env:...}`` / ``${file:...}`` references, and the active key id. It is loaded when a task starts
(:class:`EncryptFields.init`), so a worker without its key fails at start-up naming the variable, and a Dagster
code location that only builds the topology needs no key.
"""

from __future__ import annotations

import os
import pkgutil
from pathlib import Path
from typing import Any

import orjson

from streaming.encryption import FieldEncryption
from streaming.errors import ConfigError
from streaming.processor import Processor, ProcessorContext, Record
from streaming.serdes import Serde
from streaming.yaml_files import load_yaml

ENCRYPTION_FILE = Path(__file__).with_name("encryption.yaml")
DEFAULT_KEY_VARIABLE = "BROOK_ORDERS_KEY_K1"
"""The environment variable ``encryption.yaml``'s key ``k1`` refers to."""

LINE_FIELDS = ("address", "phone")
"""Encrypted in every line: ``order-lines``, ``order-lines-<category>`` and ``order-lines-late``."""
REJECTED_FIELDS = ("order.card_number", "order.address", "order.phone")
"""Encrypted in ``orders-rejected`` (beside ``order.card_masked``, the last four digits for people)."""


def encryption_settings() -> tuple[str, str]:
    """Where the keyring's settings are, and their text: the file ``BROOK_ORDERS_ENCRYPTION`` names, else
    ``apps/orders/encryption.yaml`` read as package data (so also from the zip a Spark cluster's executors run)."""
    path = os.environ.get("BROOK_ORDERS_ENCRYPTION")
    try:
        if path:
            return path, Path(path).read_text()
        data = pkgutil.get_data(__package__ or "apps.orders", ENCRYPTION_FILE.name)
    except OSError as exc:
        raise ConfigError(f"the orders pipeline's encryption settings {path or ENCRYPTION_FILE}: {exc.strerror}") \
            from None
    if data is None:
        raise ConfigError(f"the orders pipeline's encryption settings {ENCRYPTION_FILE} cannot be read")
    return str(ENCRYPTION_FILE), data.decode()


def load_encryption() -> FieldEncryption:
    """The orders pipeline's keyring (module doc); a missing file, variable or bad key is a ``ConfigError``."""
    path, text = encryption_settings()
    settings = load_yaml(text) or {}
    keys = settings.get("keys")
    if not isinstance(keys, dict) or not keys:
        raise ConfigError(f"{path}: `keys` must map key ids to ${{env:...}} or ${{file:...}} references")
    return FieldEncryption({str(key_id): reference for key_id, reference in keys.items()},
                           active_key_id=settings.get("active_key"))


def ensure_key(variable: str = DEFAULT_KEY_VARIABLE) -> bool:
    """Set ``variable`` to a new random key unless it is set (``make demo``, the benchmarks and the tests, whose
    processes inherit it); True when it made one. A key made here lives as long as the environment: what was
    encrypted with it cannot be read once it is gone."""
    if os.environ.get(variable):
        return False
    os.environ[variable] = FieldEncryption.generate_key()
    return True


class EncryptFields(Processor[Any, Any]):
    """Forward each value with ``fields`` encrypted by the pipeline's keyring (loaded when the task starts)."""

    def __init__(self, fields: tuple[str, ...]) -> None:
        self.fields = fields

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.encryption = load_encryption()

    def process(self, record: Record[Any, Any]) -> None:
        self.context.forward(record.with_value(self.encryption.encrypt_fields(record.value, self.fields)))


class ClearJsonSerde(Serde[Any]):
    """JSON values read with every encrypted field decrypted (``FieldEncryption.decrypt_found``), written as they
    are: what compares the pipeline's outputs, whose ciphertexts differ run to run (random nonces), by their clear
    values — batch against live, an output against the oracle, the demo's checks."""

    def __init__(self, encryption: FieldEncryption | None = None) -> None:
        self.encryption = encryption or load_encryption()

    def serialize(self, obj: Any) -> bytes | None:
        return None if obj is None else orjson.dumps(obj)

    def deserialize(self, data: bytes | None) -> Any:
        return None if data is None else self.encryption.decrypt_found(orjson.loads(data))

    def clear_bytes(self, data: bytes | None) -> bytes | None:
        """``data`` with its encrypted fields decrypted, as JSON bytes again (for byte-for-byte comparisons)."""
        return None if data is None else orjson.dumps(self.deserialize(data))
