"""Streams configuration: Kafka Streams' keys, validated at construction.

Keys are Kafka Streams' own (``application.id``, ``commit.interval.ms``, ...). librdkafka settings pass
through with a ``consumer.``, ``producer.`` or ``admin.`` prefix; security settings (``security.protocol``,
``sasl.*``, ``ssl.*``) reach every client. An unknown key or a bad value raises :class:`ConfigError`
naming the key. Values may refer to ``${env:NAME}`` and ``${file:/path}`` (:mod:`streaming.config_sources`).
"""

from __future__ import annotations

import difflib
import re
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streaming.config_sources import resolve_references
from streaming.errors import ConfigError
from streaming.naming import MAX_NAME_LENGTH, is_legal_name
from streaming.rdkafka_logging import RDKAFKA_LOGGER
from streaming.runtime.error_handlers import resolve_handler  # depends on streaming.errors only
from streaming.runtime.task_timeouts import DEFAULT_TASK_TIMEOUT_MS  # depends on streaming.errors only
from streaming.serdes import Serde, resolve_serde
from streaming.timestamps import RecordTimestampExtractor, TimestampExtractor, resolve_extractor
from streaming.topic_generations import check_generations

AT_LEAST_ONCE = "at_least_once"
EXACTLY_ONCE_V2 = "exactly_once_v2"
#: processing.overflow.policy: wait for input beyond the rate limit, or drop it.
BACKPRESSURE = "backpressure"
SHED = "shed"

CLIENT_PREFIXES = ("consumer.", "producer.", "admin.")
SECURITY_KEYS = re.compile(r"^(security\.protocol|sasl\.[a-z.]+|ssl\.[a-z.]+|client\.id)$")
# Keys whose values are secrets, as librdkafka spells them ("sasl.password") or as Python fields do
# ("sasl_password"). One rule for the whole project: see is_secret_key / redact.
SECRET_KEYS = re.compile(r"(password|secret|token$|sasl[._]oauthbearer[._]config|sasl[._]jaas[._]config|"
                         r"ssl[._]key[._]pem)", re.IGNORECASE)
REDACTED = "***"


def is_secret_key(key: str) -> bool:
    """Whether the value of config key ``key`` is a secret (never logged, shown or put in metadata)."""
    return SECRET_KEYS.search(key) is not None


def redact(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` with every secret value replaced by ``***`` (nested mappings too)."""
    return {key: REDACTED if is_secret_key(key) and value is not None
            else redact(value) if isinstance(value, Mapping) else value
            for key, value in settings.items()}

# Client settings Brook chooses unless the user overrides them (consumer.X / producer.X).
CONSUMER_DEFAULTS = {
    "auto.offset.reset": "earliest",  # Kafka Streams' default
    "enable.auto.commit": "false",  # offsets are committed by the runtime after outputs are acked
    "enable.auto.offset.store": "false",
    "partition.assignment.strategy": "range",  # same partition numbers of co-partitioned topics together
    # Short group timeouts: ~3 s to first assignment on the embedded broker instead of ~20 s.
    "session.timeout.ms": "6000",
    "heartbeat.interval.ms": "500",
    # The embedded broker answers fetches with ~4.5 MB per partition; librdkafka's 1 s default
    # backoff then stalls partitions (~120k records/s instead of 300k+). Harmless on Kafka.
    "fetch.queue.backoff.ms": "10",
    # The embedded broker holds a fetch for the whole fetch.wait.max.ms even when records are there (librdkafka's
    # 500 ms default: p50 242 ms per hop, measured at 15,000 records/s); 50 ms gives p50 ~36 ms. Kafka answers a
    # fetch as soon as it has records, so there it only means an idle consumer asks 20 times a second, not 2.
    "fetch.wait.max.ms": "50",
}
PRODUCER_DEFAULTS = {
    "partitioner": "murmur2_random",  # the Java client's partitioner: same key, same partition as Kafka Streams
    "linger.ms": "5",
    "enable.idempotence": "true",
}
MAX_POLL_RECORDS_LIMIT = 1_000_000
# Keys Brook reads itself and so never passes to librdkafka.
CONSUMER_BROOK_KEYS = {"consumer.max.poll.records"}
# librdkafka keys the runtime owns; the user may not override them.
CONSUMER_RESERVED = {"group.id", "enable.auto.commit", "enable.auto.offset.store"}


def _int(minimum: int | None = None) -> Callable[[Any], int]:
    def convert(value: Any) -> int:
        if isinstance(value, bool):
            raise ValueError("expected an integer, got a boolean")
        if isinstance(value, float) and not value.is_integer():
            raise ValueError(f"expected an integer, got {value}")
        number = int(value)
        if minimum is not None and number < minimum:
            raise ValueError(f"must be >= {minimum}")
        return number
    return convert


def _max_poll_records(value: Any) -> int:
    number = _int(1)(value)
    if number > MAX_POLL_RECORDS_LIMIT:
        raise ValueError(f"must be at most {MAX_POLL_RECORDS_LIMIT:,} (confluent-kafka's consume() limit)")
    return number


def _port(value: Any) -> int:
    number = _int(0)(value)
    if number > 65535:
        raise ValueError(f"must be a port number 0..65535 (0: off), got {number}")
    return number


def _choice(*choices: str) -> Callable[[Any], str]:
    def convert(value: Any) -> str:
        if value not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return str(value)
    return convert


def _application_id(value: Any) -> str:
    if not is_legal_name(value):
        raise ValueError(f"must be 1-{MAX_NAME_LENGTH} letters, digits, '.', '_' or '-' (not '.' or '..'): it "
                         f"prefixes the internal topics and names the state directory")
    return value


def _non_empty(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("must be a non-empty string")
    return value


def _optional_string(value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError("must be a string (a path or a URI)")
    return value.strip()


def _optional_file(value: Any) -> str:
    path = _optional_string(value)
    if path and not Path(path).is_file():
        raise ValueError(f"{path} is not a readable file")
    return path


def _boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueError("expected true or false")


def _instance_name(value: Any) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9._-]{0,200}", value):
        raise ValueError("expected letters, digits, '.', '_' or '-' (at most 200)")
    return value


def _host_port(value: Any) -> str:
    if value in ("", None):
        return ""
    if not isinstance(value, str) or not re.fullmatch(r"[^:\s]+:\d{1,5}", value):
        raise ValueError("must be 'host:port'")
    return value


@dataclass(frozen=True)
class _Key:
    convert: Callable[[Any], Any]
    default: Any
    required: bool = False


KEYS: dict[str, _Key] = {
    "application.id": _Key(_application_id, None, required=True),
    "bootstrap.servers": _Key(_non_empty, None, required=True),
    "processing.guarantee": _Key(_choice(AT_LEAST_ONCE, EXACTLY_ONCE_V2), AT_LEAST_ONCE),
    "commit.interval.ms": _Key(_int(0), None),  # None: 30000, or 100 under exactly_once_v2
    "state.dir": _Key(lambda v: str(Path(v)), str(Path(tempfile.gettempdir()) / "brook-streams")),
    # Where the platform's changelog compaction writes snapshots (platform.yaml `snapshots.location`): a
    # task without local state loads the newest one, then restores only the changelog after it.
    "state.snapshot.location": _Key(_optional_string, ""),
    "num.stream.threads": _Key(_int(1), 1),
    "num.standby.replicas": _Key(_int(0), 0),
    "statestore.cache.max.bytes": _Key(_int(0), 10 * 1024 * 1024),
    "default.key.serde": _Key(resolve_serde, "String"),
    "default.value.serde": _Key(resolve_serde, "Json"),
    "default.timestamp.extractor": _Key(resolve_extractor, RecordTimestampExtractor),
    "default.deserialization.exception.handler": _Key(resolve_handler, "fail"),
    "processing.exception.handler": _Key(resolve_handler, "fail"),
    "production.exception.handler": _Key(resolve_handler, "fail"),
    "max.task.idle.ms": _Key(_int(-1), 0),
    # Kafka Streams' task.timeout.ms (KIP-572): how long a new task may make no progress because the broker does
    # not answer what it needs (its committed offsets, the end of its stream-time partition, a changelog's end)
    # before the stream thread fails; until then the task is retried and the thread's other tasks process
    # (streaming/runtime/task_timeouts.py). 0: fail at the second failure.
    "task.timeout.ms": _Key(_int(0), DEFAULT_TASK_TIMEOUT_MS),
    # Backpressure (docs/configuration.md, "Throttling and backpressure"): a partition whose task buffers this many records
    # is paused until its buffer is half drained; one loop iteration processes buffered records for at most
    # max.poll.processing.ms (0: no cap) before it polls, punctuates and commits again; the instance takes
    # at most this many input records / key+value bytes per second, split over its stream threads (0: off).
    "buffered.records.per.partition": _Key(_int(1), 1000),
    "max.poll.processing.ms": _Key(_int(0), 1000),
    "processing.rate.limit.records": _Key(_int(0), 0),
    "processing.rate.limit.bytes": _Key(_int(0), 0),
    # What happens to input beyond the rate limit (docs/load-shedding.md): ``backpressure`` waits for it
    # (nothing lost, lag grows); ``shed`` drops it, counted per partition, logged with offsets, and with
    # ``processing.overflow.shed.divert`` written to ``<application.id>-shed`` (streaming/runtime/load_shedding.py).
    "processing.overflow.policy": _Key(_choice(BACKPRESSURE, SHED), BACKPRESSURE),
    "processing.overflow.shed.divert": _Key(_boolean, False),
    # The idle watchdog (streaming/runtime/idle_watchdog.py): a source topic whose assigned partitions get no
    # record for this long is reported idle to <application.id>-alerts and brook_source_idle (0: off).
    "processing.idle.timeout.ms": _Key(_int(0), 0),
    # The source topics it watches, comma-separated (empty: every source topic the app does not own; name the
    # streams, since a table's topic is quiet by nature).
    "processing.idle.topics": _Key(_optional_string, ""),
    # Whether nodes that write outside Kafka (KStream/KTable.to_database) write: false makes them write nothing,
    # as batch reprocessing runs them, so a recomputed day never touches the live database.
    "external.sinks.enabled": _Key(_boolean, True),
    "application.server": _Key(_host_port, ""),
    # A name for this instance that stays the same across its restarts (a host name, a pod name). It makes
    # the ids the instance's clients present stable: static membership (``group.instance.id``) and the
    # transactional ids of ``exactly_once_v2``. Empty: the instance has no stable identity.
    "instance.name": _Key(_instance_name, ""),
    # Static group membership (``group.instance.id`` per stream thread, from instance.name): a restart within
    # session.timeout.ms keeps the instance's tasks without a rebalance. Off by default, as in Kafka Streams (where
    # the user sets group.instance.id): the embedded broker handles static members badly (docs/broker-limits.md).
    "static.membership": _Key(_boolean, False),
    # The interactive-query endpoint's security: HTTPS with this certificate and key (PEM files), a bearer
    # token every request must carry (a secret: use ${env:...} or ${file:...}), and the CA that the other
    # instances' certificates are checked against when KafkaStreams.query() asks them.
    "application.server.tls.cert": _Key(_optional_file, ""),
    "application.server.tls.key": _Key(_optional_file, ""),
    "application.server.tls.ca": _Key(_optional_file, ""),
    "application.server.token": _Key(_optional_string, ""),
    "poll.ms": _Key(_int(0), 100),
    # The interpreter's generation-0 garbage-collection threshold while the instance runs (0: the interpreter's
    # own, 700 by default): a stream thread keeps many objects alive, and the default walks them thousands of times
    # per million records (streaming/runtime/gc_tuning.py). Process-wide; given back at close().
    "python.gc.threshold0": _Key(_int(0), 50_000),
    # Prometheus /metrics on this port, every interface (0: not served; KafkaStreams.metrics_registry still works).
    "metrics.port": _Key(_port, 0),
    # Partition scaling's topic generations ({logical topic: generation}; absent: generation 1, the logical name):
    # the physical topic the runtime reads and writes for each key-partitioned topic, internal ones included
    # (streaming/topic_generations.py). `brook worker run` sets it from platform.yaml's `topic_generations`.
    "topic.generations": _Key(check_generations, {}),
}


class StreamsConfig:
    """Validated Streams configuration. Read values with ``config["commit.interval.ms"]``."""

    def __init__(self, config: Mapping[str, Any], *, require_bootstrap: bool = True) -> None:
        config = resolve_references(config)  # ${env:NAME} and ${file:/path} in values
        self._values: dict[str, Any] = {}
        self._clients: dict[str, dict[str, str]] = {"consumer": {}, "producer": {}, "admin": {}}
        self._security: dict[str, str] = {}
        self._brook_client_keys: dict[str, Any] = {}
        #: The application's reset epoch (``none``, ``1``, ...), set by ``KafkaStreams.start`` from
        #: ``<application.id>-epoch`` (streaming.runtime.reset_epoch); what a database sink stamps on its rows.
        self.reset_epoch = "none"
        for key, raw in config.items():
            if not isinstance(key, str):
                raise ConfigError(f"config key {key!r} is not a string")
            if key in KEYS:
                try:
                    self._values[key] = KEYS[key].convert(raw)
                except (ValueError, TypeError, ImportError, AttributeError) as exc:
                    shown = REDACTED if is_secret_key(key) else repr(raw)
                    raise ConfigError(f"invalid value {shown} for config key '{key}': {exc}") from None
            elif key in CONSUMER_BROOK_KEYS:
                try:
                    self._brook_client_keys[key] = _max_poll_records(raw)
                except (ValueError, TypeError) as exc:
                    raise ConfigError(f"invalid value {raw!r} for config key '{key}': {exc}") from None
            elif key.startswith(CLIENT_PREFIXES):
                client, _, setting = key.partition(".")
                if not setting:
                    raise ConfigError(f"config key '{key}' names no client setting")
                if client == "consumer" and setting == "group.instance.id":
                    raise ConfigError(f"config key '{key}' is set by the runtime, one per stream thread: set "
                                      f"'instance.name' and 'static.membership=true' instead (group.instance.id = "
                                      f"<application.id>-<instance.name>-<thread number>)")
                if client == "consumer" and setting in CONSUMER_RESERVED:
                    raise ConfigError(f"config key '{key}' is set by the runtime and cannot be overridden")
                self._clients[client][setting] = _client_value(raw)
            elif SECURITY_KEYS.match(key):
                self._security[key] = _client_value(raw)
            else:
                raise ConfigError(_unknown_key_message(key))
        for key, spec in KEYS.items():
            if key in self._values:
                continue
            if spec.required and (require_bootstrap or key != "bootstrap.servers"):
                raise ConfigError(f"missing required config key '{key}'")
            default = spec.default
            self._values[key] = spec.convert(default) if default is not None and key.startswith("default.") else default
        if bool(self._values["application.server.tls.cert"]) != bool(self._values["application.server.tls.key"]):
            raise ConfigError("config keys 'application.server.tls.cert' and 'application.server.tls.key' go "
                              "together: HTTPS needs both the certificate and its key")
        if self._values["static.membership"] and not self._values["instance.name"]:
            raise ConfigError("config key 'static.membership' needs 'instance.name': the group.instance.id of each "
                              "stream thread is made from it")
        self._check_overflow_settings()
        if self._values["commit.interval.ms"] is None:
            self._values["commit.interval.ms"] = 100 if self.exactly_once else 30000
        if self.exactly_once:
            self._check_exactly_once_settings()
        self._check_client_settings()

    def _check_overflow_settings(self) -> None:
        """``shed`` needs a rate limit to shed beyond, and a divert needs ``shed``; both errors name the keys."""
        policy = self._values["processing.overflow.policy"]
        if policy == SHED and not (self._values["processing.rate.limit.records"]
                                   or self._values["processing.rate.limit.bytes"]):
            raise ConfigError("config key 'processing.overflow.policy'='shed' needs a rate limit to shed beyond: set "
                              "'processing.rate.limit.records' (or 'processing.rate.limit.bytes') above 0")
        if self._values["processing.overflow.shed.divert"] and policy != SHED:
            raise ConfigError("config key 'processing.overflow.shed.divert' needs "
                              "'processing.overflow.policy'='shed' (it diverts what is shed)")

    def _check_exactly_once_settings(self) -> None:
        """Client settings that would break ``exactly_once_v2`` are refused, naming the key."""
        owned = {("producer", "transactional.id"): "set by the runtime per stream thread (from application.id, "
                                                    "instance.name and the thread index)",
                 ("producer", "enable.idempotence"): "transactions need an idempotent producer",
                 ("consumer", "isolation.level"): "the runtime's consumers read only committed records"}
        required = {("producer", "enable.idempotence"): "true", ("consumer", "isolation.level"): "read_committed"}
        for (client, setting), why in owned.items():
            value = self._clients[client].get(setting)
            if value is not None and value != required.get((client, setting)):
                raise ConfigError(f"config key '{client}.{setting}'={value!r} cannot be used with "
                                  f"processing.guarantee=exactly_once_v2: {why}")

    def _check_client_settings(self) -> None:
        """Build each client once, unconnected, so librdkafka judges every pass-through setting now (an
        unknown key, a bad value, an unsupported SASL mechanism), not when the app starts; a failure
        names the setting as the user wrote it."""
        check_security_files(self._security)
        mechanism = self._security.get("sasl.mechanism", self._security.get("sasl.mechanisms"))
        if mechanism is not None and mechanism not in SASL_MECHANISMS:
            key = "sasl.mechanism" if "sasl.mechanism" in self._security else "sasl.mechanisms"
            raise ConfigError(f"invalid value {mechanism!r} for config key '{key}': must be one of "
                              f"{', '.join(SASL_MECHANISMS)}")
        user_keys = {"consumer": [f"consumer.{k}" for k in self._clients["consumer"]],
                     "producer": [f"producer.{k}" for k in self._clients["producer"]],
                     "admin": [f"admin.{k}" for k in self._clients["admin"]]}
        for client, settings in (("consumer", self.consumer_config()), ("producer", self.producer_config()),
                                 ("admin", self.admin_config())):
            error = _client_error(client, settings)
            if error is None:
                continue
            for key in [*user_keys[client], *self._security] if "configuration property" in error else []:
                setting = key.partition(".")[2] if key in user_keys[client] else key
                alone = _client_error(client, {setting: settings[setting]})
                if alone is None or "configuration property" not in alone:
                    continue
                if "No such configuration property" in alone:
                    raise ConfigError(f"unknown config key '{key}': librdkafka has no setting {setting!r}")
                shown = REDACTED if is_secret_key(key) else repr(settings[setting])
                raise ConfigError(f"invalid value {shown} for config key '{key}': librdkafka says: {alone}")
            raise ConfigError(f"the {client} settings are invalid together: librdkafka says: {error} "
                              f"(settings given: {', '.join(user_keys[client] + list(self._security)) or 'none'})")

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    @property
    def application_id(self) -> str:
        return self._values["application.id"]

    @property
    def exactly_once(self) -> bool:
        return self._values["processing.guarantee"] == EXACTLY_ONCE_V2

    @property
    def default_key_serde(self) -> Serde[Any]:
        return self._values["default.key.serde"]

    @property
    def default_value_serde(self) -> Serde[Any]:
        return self._values["default.value.serde"]

    @property
    def default_timestamp_extractor(self) -> TimestampExtractor:
        return self._values["default.timestamp.extractor"]

    @property
    def max_poll_records(self) -> int:
        return self._brook_client_keys.get("consumer.max.poll.records", 2000)

    def consumer_config(self) -> dict[str, Any]:
        """librdkafka settings of the main consumer (group id = application.id); its logs go to
        ``streaming.rdkafka`` (repeats held back). Every other consumer of the runtime (restore, standby,
        global) derives from these, so ``isolation.level`` is the same for all: ``read_committed`` under
        ``exactly_once_v2``, ``read_uncommitted`` otherwise (Kafka Streams' choice; librdkafka's own default
        would be read_committed)."""
        isolation = "read_committed" if self.exactly_once else "read_uncommitted"
        return {"bootstrap.servers": self["bootstrap.servers"], **CONSUMER_DEFAULTS, "isolation.level": isolation,
                **self._security, **self._clients["consumer"], "group.id": self.application_id,
                "enable.auto.commit": "false", "enable.auto.offset.store": "false", "logger": RDKAFKA_LOGGER}

    def group_instance_id(self, thread: int) -> str | None:
        """Static group membership: the ``group.instance.id`` of stream thread ``thread`` (numbered from 1),
        ``<application.id>-<instance.name>-<thread>``; None unless ``static.membership`` is on."""
        if not self["static.membership"]:
            return None
        return f"{self.application_id}-{self['instance.name']}-{thread}"

    def producer_config(self) -> dict[str, Any]:
        """librdkafka settings of the producer."""
        return {"bootstrap.servers": self["bootstrap.servers"], **PRODUCER_DEFAULTS, **self._security,
                **self._clients["producer"], "logger": RDKAFKA_LOGGER}

    def admin_config(self) -> dict[str, Any]:
        """librdkafka settings of the admin client."""
        return {"bootstrap.servers": self["bootstrap.servers"], **self._security, **self._clients["admin"],
                "logger": RDKAFKA_LOGGER}

    def client_security(self) -> dict[str, str]:
        """The security settings (``security.protocol``, ``sasl.*``, ``ssl.*``, ``client.id``) given once in
        the config; every ``*_config()`` above merges them, so every client the runtime creates has them."""
        return dict(self._security)

    def redacted(self) -> dict[str, Any]:
        """All settings with secrets replaced by ``***``, for logs and metadata."""
        shown: dict[str, Any] = {k: repr(v) if k.startswith("default.") else v for k, v in self._values.items()}
        for client, settings in self._clients.items():
            shown.update({f"{client}.{k}": v for k, v in settings.items()})
        shown.update(self._security)
        return redact(shown)


SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "OAUTHBEARER")
# The smallest config each client type accepts; probes never name a broker, so nothing connects.
_CLIENT_BASE: dict[str, dict[str, str]] = {"consumer": {"group.id": "config-check"}, "producer": {}, "admin": {}}


def _client_error(client: str, settings: Mapping[str, str]) -> str | None:
    """What librdkafka says when building a ``client`` with ``settings`` (no bootstrap: it never connects),
    or None if it accepts them. Its warnings go nowhere: the real clients log them."""
    import logging

    from confluent_kafka import Consumer, KafkaException, Producer
    from confluent_kafka.admin import AdminClient

    silent = logging.getLogger("streaming.config.probe")
    silent.propagate = False
    silent.addHandler(logging.NullHandler())
    probe = {**_CLIENT_BASE[client], **{k: v for k, v in settings.items() if k != "bootstrap.servers"},
             "logger": silent}
    try:
        if client == "consumer":
            Consumer(probe).close()
        elif client == "producer":
            Producer(probe)
        else:
            AdminClient(probe)
    except KafkaException as exc:
        return exc.args[0].str() if exc.args and hasattr(exc.args[0], "str") else str(exc)
    return None


def is_config_key(key: str) -> bool:
    """Whether ``key`` is a key StreamsConfig takes (its own, a client-prefixed or a security setting)."""
    return key in KEYS or key in CONSUMER_BROOK_KEYS or (key.startswith(CLIENT_PREFIXES) and "." in key[6:]) \
        or SECURITY_KEYS.match(key) is not None


def security_settings(settings: Mapping[str, Any]) -> dict[str, str]:
    """The client security settings among ``settings`` (``security.protocol``, ``sasl.*``, ``ssl.*``,
    ``client.id``), as librdkafka strings; the files they name must be readable (:class:`ConfigError`)."""
    security = {key: _client_value(value) for key, value in settings.items() if SECURITY_KEYS.match(key)}
    check_security_files(security)
    return security


# ssl.ca.location may also be a directory of CA certificates, or "probe" (the system's).
_SECURITY_FILES = ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "ssl.crl.location",
                   "ssl.keystore.location")


def check_security_files(security: Mapping[str, str]) -> None:
    """Raise :class:`ConfigError` naming the key and path when a TLS file setting names nothing readable
    (librdkafka would only say ``BIO lib``)."""
    for key in _SECURITY_FILES:
        location = security.get(key)
        if not location or (key == "ssl.ca.location" and location == "probe"):
            continue
        path = Path(location)
        if not path.exists():
            raise ConfigError(f"config key '{key}' names {location}, which does not exist")
        if path.is_dir():
            if key != "ssl.ca.location":
                raise ConfigError(f"config key '{key}' names {location}, which is a directory, not a file")
            continue
        try:
            path.open("rb").close()
        except OSError as exc:
            raise ConfigError(f"config key '{key}' names {location}, which cannot be read: "
                              f"{exc.strerror or exc}") from None


def _client_value(raw: Any) -> str:
    if isinstance(raw, bool):
        return "true" if raw else "false"
    return str(raw)


def _unknown_key_message(key: str) -> str:
    known = [*KEYS, *CONSUMER_BROOK_KEYS, "consumer.<librdkafka key>", "producer.<librdkafka key>",
             "admin.<librdkafka key>", "security.protocol", "sasl.*", "ssl.*"]
    close = difflib.get_close_matches(key, list(KEYS), n=1)
    hint = f" Did you mean '{close[0]}'?" if close else ""
    return (f"unknown config key '{key}'.{hint} librdkafka settings need a 'consumer.', 'producer.' or "
            f"'admin.' prefix. Known keys: {', '.join(known)}")
