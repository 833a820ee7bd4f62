"""Dagster resources of the Brook code location, and the one place that picks them per environment.

- :class:`KafkaResource`: ``bootstrap.servers`` plus security settings, handed to every Kafka
  client the platform's assets create. Secrets come from ``dg.EnvVar`` so they never appear in run
  config, logs or asset metadata; :meth:`KafkaResource.redacted_config` is the printable form.
- :class:`PlatformResource`: the platform spec (``platform/platform.yaml``).
- :class:`SparkResource`: dagster-pyspark's lazily started SparkSession with the conf of
  ``platform/spark/spark-defaults.conf`` and the ``brook-kafka`` source registered.

:func:`kafka_resource` chooses the cluster: ``BROOK_CLUSTER`` (default: the spec's
``default_cluster``), with ``BROOK_BOOTSTRAP_SERVERS`` overriding its bootstrap servers.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import dagster as dg
from dagster_pyspark import LazyPySparkResource

from assets.platform_spec import PlatformSpec, load_platform_spec, repo_root
from streaming.config import REDACTED, is_secret_key, redact

__all__ = [
    "SPARK_CONF_ENV_VAR",
    "SPARK_MASTER_ENV_VAR",
    "KafkaResource",
    "PlatformResource",
    "SparkResource",
    "kafka_resource",
    "kafka_source_options",
    "spark_resource",
]

#: Environment variable naming a Spark conf file to use instead of ``platform/spark/spark-defaults.conf``.
SPARK_CONF_ENV_VAR = "BROOK_SPARK_CONF"
#: Environment variable overriding the conf file's ``spark.master`` (``spark://host:7077``, ``k8s://...``).
SPARK_MASTER_ENV_VAR = "BROOK_SPARK_MASTER"


class KafkaResource(dg.ConfigurableResource):
    """Connection settings for a Kafka cluster (Apache Kafka 3.x+ or the embedded broker).

    Field names follow librdkafka's keys with ``_`` for ``.``; ``client_settings`` passes any
    other librdkafka setting through unchanged.
    """

    bootstrap_servers: str = "127.0.0.1:9092"
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = None
    ssl_ca_location: str | None = None
    ssl_certificate_location: str | None = None
    ssl_key_location: str | None = None
    ssl_key_password: str | None = None
    client_settings: dict[str, str] = {}  # noqa: RUF012 - pydantic copies field defaults

    def client_config(self, **overrides: Any) -> dict[str, Any]:
        """librdkafka settings for a consumer, producer or admin client (contains secrets)."""
        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "security.protocol": self.security_protocol,
        }
        optional = {
            "sasl.mechanism": self.sasl_mechanism,
            "sasl.username": self.sasl_username,
            "sasl.password": self.sasl_password,
            "ssl.ca.location": self.ssl_ca_location,
            "ssl.certificate.location": self.ssl_certificate_location,
            "ssl.key.location": self.ssl_key_location,
            "ssl.key.password": self.ssl_key_password,
        }
        config.update({key: value for key, value in optional.items() if value})
        config.update(self.client_settings)
        config.update(overrides)
        return config

    def redacted_config(self) -> dict[str, Any]:
        """:meth:`client_config` with secrets replaced by ``***`` (safe for logs and metadata); the rule
        is the runtime's (:func:`streaming.config.redact`)."""
        return redact(self.client_config())

    def __repr_args__(self) -> Any:
        """``repr()`` and ``str()`` show secret fields (and secret ``client_settings``) as ``***``."""
        for name, value in super().__repr_args__():
            if name is not None and is_secret_key(name) and value is not None:
                yield name, REDACTED
            elif isinstance(value, dict):
                yield name, redact(value)
            else:
                yield name, value

    def security_config(self) -> dict[str, Any]:
        """:meth:`client_config` without ``bootstrap.servers`` (``client_config`` of ``streaming.admin``)."""
        config = self.client_config()
        config.pop("bootstrap.servers")
        return config

    def partition_counts(self, topics: list[str]) -> dict[str, int | None]:
        """Partition count per topic (``None`` when missing), read from cluster metadata."""
        from streaming.admin import partition_counts

        return partition_counts(self.bootstrap_servers, topics, self.security_config())


def kafka_source_options(kafka: KafkaResource) -> dict[str, str]:
    """Options for ``spark.read.format("brook-kafka")`` that connect to ``kafka``'s cluster with its
    security settings (``kafka.bootstrap.servers``, ``kafka.security.protocol``, ``kafka.sasl.*``, ...).

    Holds secrets: pass it to ``.options(**...)``, never to logs or metadata.
    """
    from assets.spark import client_options

    return client_options(kafka.client_config())


class PlatformResource(dg.ConfigurableResource):
    """The platform spec, read from ``path`` (default: ``platform/platform.yaml`` of the checkout)."""

    path: str = str(repo_root() / "platform" / "platform.yaml")

    def spec(self) -> PlatformSpec:
        """Load and validate the spec (raises ``PlatformSpecError`` naming every problem)."""
        return load_platform_spec(self.path)


class SparkResource(LazyPySparkResource):
    """A SparkSession started on first use (``.spark_session``), shared by the run's process, with
    ``spark_config`` applied and the ``brook-kafka`` source registered (see ``assets.spark.session``)."""

    def _init_session(self) -> None:
        if self._spark_session is None:
            from assets.spark.session import spark_session

            self._spark_session = spark_session({k: str(v) for k, v in self.spark_config.items()})


def spark_resource(conf_path: Path | str | None = None) -> SparkResource:
    """The Spark resource with the settings of ``conf_path``, else ``$BROOK_SPARK_CONF``, else
    ``platform/spark/spark-defaults.conf`` (read now: a bad file fails when the code location loads), and
    ``spark.master`` from ``$BROOK_SPARK_MASTER`` when set."""
    from assets.spark.session import read_spark_defaults

    chosen = conf_path or os.environ.get(SPARK_CONF_ENV_VAR) or repo_root() / "platform" / "spark" / "spark-defaults.conf"
    conf = read_spark_defaults(chosen)
    if os.environ.get(SPARK_MASTER_ENV_VAR):
        conf["spark.master"] = os.environ[SPARK_MASTER_ENV_VAR]
    return SparkResource(spark_config=conf)


def _embedded_bootstrap(workdir: str | None, default: str) -> str:
    """The address recorded by a running ``brook broker`` in ``workdir``, else ``default``."""
    if not workdir:
        return default
    from streaming.broker import BrokerError, EmbeddedBroker

    path = Path(workdir)
    if not path.is_absolute():
        path = repo_root() / path
    try:
        broker = EmbeddedBroker.from_state(path)
    except BrokerError:
        return default
    if broker is not None and broker.is_running():
        return broker.bootstrap_servers
    return default


def kafka_resource(spec: PlatformSpec, cluster: str | None = None) -> KafkaResource:
    """The :class:`KafkaResource` for ``cluster`` (default: ``$BROOK_CLUSTER`` or the spec's default).

    ``BROOK_BOOTSTRAP_SERVERS``, when set, wins over the spec's bootstrap servers (resolved when a run
    starts, through ``dg.EnvVar``). For the embedded cluster, a broker started with ``brook broker
    start`` is found through its state file when the code location loads.
    """
    chosen = spec.cluster(cluster)
    bootstrap: str | dg.EnvVar
    if os.environ.get("BROOK_BOOTSTRAP_SERVERS"):
        bootstrap = dg.EnvVar("BROOK_BOOTSTRAP_SERVERS")
    elif chosen.embedded:
        bootstrap = _embedded_bootstrap(chosen.workdir, chosen.bootstrap_servers)
    else:
        bootstrap = chosen.bootstrap_servers
    return KafkaResource(
        bootstrap_servers=bootstrap,
        security_protocol=chosen.security_protocol,
        sasl_mechanism=chosen.sasl_mechanism,
        sasl_username=dg.EnvVar(chosen.sasl_username_env) if chosen.sasl_username_env else None,
        sasl_password=dg.EnvVar(chosen.sasl_password_env) if chosen.sasl_password_env else None,
        ssl_ca_location=chosen.ssl_ca_location,
    )
