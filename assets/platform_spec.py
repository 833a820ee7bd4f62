"""The platform spec (``platform/platform.yaml``): apps, topics, stores, quality rules, clusters.

One validated model of what the platform runs. Every model forbids unknown keys, and cross
references are checked (an app's topic, a store's ``partitions_from``, a quality rule's topic must
be declared; co-partitioned topics must agree on their partition count), so a typo fails loudly
when the code location loads instead of becoming a silent default.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal, Self

import yaml
from pydantic import BaseModel, ConfigDict, Field, PositiveInt, ValidationError, model_validator

__all__ = [
    "AppSpec",
    "ClusterSpec",
    "PlatformSpec",
    "PlatformSpecError",
    "QualityRule",
    "SnapshotsSpec",
    "StoreSpec",
    "TopicSpec",
    "find_spec_path",
    "load_platform_spec",
    "repo_root",
]

#: Environment variable naming the spec file to load instead of the default.
SPEC_ENV_VAR = "BROOK_PLATFORM_SPEC"


class PlatformSpecError(ValueError):
    """The platform spec is missing, not YAML, or not valid."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ClusterSpec(_Model):
    """How clients reach one Kafka cluster. Secrets are named by environment variable, never inlined."""

    bootstrap_servers: str = Field(min_length=1)
    embedded: bool = False
    workdir: str | None = None
    """For the embedded broker: the ``brook broker`` workdir whose state file gives its address."""
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    sasl_username_env: str | None = None
    sasl_password_env: str | None = None
    ssl_ca_location: str | None = None

    @model_validator(mode="after")
    def _sasl_complete(self) -> Self:
        sasl_complete = self.sasl_mechanism and self.sasl_username_env and self.sasl_password_env
        if self.security_protocol.startswith("SASL_") and not sasl_complete:
            raise ValueError(
                f"security_protocol {self.security_protocol} needs sasl_mechanism, sasl_username_env "
                "and sasl_password_env"
            )
        return self


class TopicSpec(_Model):
    """A topic the platform owns. ``config`` is set at creation (never rely on broker defaults)."""

    partitions: PositiveInt
    key: str = ""
    value: str = ""
    description: str = ""
    config: dict[str, str] = Field(default_factory=dict)


class StoreSpec(_Model):
    """A state store of an app. Its tasks (and changelog partitions) follow ``partitions_from``."""

    name: str = Field(min_length=1)
    type: Literal["key_value", "window", "session"] = "key_value"
    changelog: bool = True
    partitions_from: str


class AppSpec(_Model):
    """A stream application: its topology, worker config, topics and stores."""

    application_id: str = Field(min_length=1)
    topology: str = Field(pattern=r"^[\w.]+:\w+$", description="MODULE:FACTORY for `brook worker run`")
    config: str
    workers: PositiveInt = 1
    inputs: list[str] = Field(min_length=1)
    outputs: list[str] = Field(default_factory=list)
    stores: list[StoreSpec] = Field(default_factory=list)
    co_partitioned: list[list[str]] = Field(default_factory=list)
    """Groups of input topics that must have equal partition counts (joined by key)."""

    def changelog_topic(self, store: str) -> str:
        """``<application_id>-<store>-changelog``, as Kafka Streams names it."""
        return f"{self.application_id}-{store}-changelog"


class QualityRule(_Model):
    """A data-quality rule on an output topic's values (checked by Great Expectations, planned)."""

    name: str = Field(pattern=r"^[A-Za-z0-9_]+$")
    topic: str
    check: Literal["not_null", "range", "unique", "absent", "freshness"]
    columns: list[str] = Field(default_factory=list)
    min: float | None = None
    max: float | None = None
    max_age_minutes: PositiveInt | None = None
    severity: Literal["WARN", "ERROR"] = "ERROR"

    @model_validator(mode="after")
    def _arguments_fit_check(self) -> Self:
        if self.check in ("not_null", "range", "unique", "absent") and not self.columns:
            raise ValueError(f"rule {self.name!r}: check {self.check!r} needs columns")
        if self.check == "range" and self.min is None and self.max is None:
            raise ValueError(f"rule {self.name!r}: check 'range' needs min and/or max")
        if self.check == "freshness" and self.max_age_minutes is None:
            raise ValueError(f"rule {self.name!r}: check 'freshness' needs max_age_minutes")
        return self


class SnapshotsSpec(_Model):
    """Where changelog compaction writes store snapshots (and workers read them), and how many to keep.

    ``location``: a local directory (relative paths are relative to the repository root) or a URI
    the cluster can reach: ``s3a://bucket/prefix`` (Spark's S3A connector; read as ``s3://`` by
    pyarrow), ``hdfs://namenode/path``, ``file:///abs/path``.
    """

    location: str = Field(default=".brook/snapshots", min_length=1)
    keep: PositiveInt = 3

    def resolved_location(self, root: Path) -> str:
        """``location`` with a relative local path made absolute against ``root``."""
        if "://" in self.location or Path(self.location).is_absolute():
            return self.location
        return str(root / self.location)


class PlatformSpec(_Model):
    """The whole platform spec (``platform/platform.yaml``)."""

    version: Literal[1]
    default_cluster: str
    clusters: dict[str, ClusterSpec] = Field(min_length=1)
    topics: dict[str, TopicSpec]
    apps: dict[str, AppSpec]
    quality: list[QualityRule] = Field(default_factory=list)
    snapshots: SnapshotsSpec = Field(default_factory=SnapshotsSpec)

    @model_validator(mode="after")
    def _references_resolve(self) -> Self:
        errors: list[str] = []
        if self.default_cluster not in self.clusters:
            errors.append(f"default_cluster {self.default_cluster!r} is not one of {sorted(self.clusters)}")
        app_ids: dict[str, str] = {}
        for name, app in self.apps.items():
            if app.application_id in app_ids:
                errors.append(f"apps {app_ids[app.application_id]!r} and {name!r} share application_id")
            app_ids[app.application_id] = name
            for topic in [*app.inputs, *app.outputs, *(t for group in app.co_partitioned for t in group)]:
                if topic not in self.topics:
                    errors.append(f"app {name!r}: topic {topic!r} is not declared under topics")
            for store in app.stores:
                if store.partitions_from not in app.inputs:
                    errors.append(
                        f"app {name!r}: store {store.name!r} partitions_from {store.partitions_from!r} "
                        "is not one of the app's inputs"
                    )
            for group in app.co_partitioned:
                counts = {t: self.topics[t].partitions for t in group if t in self.topics}
                if len(set(counts.values())) > 1:
                    errors.append(f"app {name!r}: co-partitioned topics differ in partition count: {counts}")
        for rule in self.quality:
            if rule.topic not in self.topics:
                errors.append(f"quality rule {rule.name!r}: topic {rule.topic!r} is not declared")
        if len({rule.name for rule in self.quality}) != len(self.quality):
            errors.append("quality rule names must be unique")
        if errors:
            raise ValueError("; ".join(errors))
        return self

    def cluster(self, name: str | None = None) -> ClusterSpec:
        """The named cluster, else ``$BROOK_CLUSTER``, else ``default_cluster``."""
        chosen = name or os.environ.get("BROOK_CLUSTER") or self.default_cluster
        try:
            return self.clusters[chosen]
        except KeyError:
            known = sorted(self.clusters)
            raise PlatformSpecError(f"unknown cluster {chosen!r}; declared: {known}") from None

    def changelog_topics(self) -> dict[str, tuple[str, StoreSpec]]:
        """Changelog topic name -> (app name, store) for every logged store."""
        return {
            app.changelog_topic(store.name): (app_name, store)
            for app_name, app in self.apps.items()
            for store in app.stores
            if store.changelog
        }

    def topic_partitions(self, *, include_changelogs: bool = True) -> dict[str, int]:
        """Topic name -> partition count, for ``streaming.admin.create_topics``."""
        counts = {name: topic.partitions for name, topic in self.topics.items()}
        if include_changelogs:
            for changelog, (_app, store) in self.changelog_topics().items():
                counts[changelog] = self.topics[store.partitions_from].partitions
        return counts


def repo_root() -> Path:
    """The checkout this package lives in (``assets/..``)."""
    return Path(__file__).resolve().parent.parent


def find_spec_path() -> Path:
    """``$BROOK_PLATFORM_SPEC``, else ``./platform/platform.yaml``, else the checkout's copy."""
    if os.environ.get(SPEC_ENV_VAR):
        return Path(os.environ[SPEC_ENV_VAR])
    local = Path.cwd() / "platform" / "platform.yaml"
    if local.is_file():
        return local
    return repo_root() / "platform" / "platform.yaml"


def load_platform_spec(path: Path | str | None = None) -> PlatformSpec:
    """Read and validate the platform spec.

    Raises:
        PlatformSpecError: the file is missing, not YAML, or invalid (the message names the file
            and every problem found).
    """
    spec_path = Path(path) if path is not None else find_spec_path()
    try:
        raw = yaml.safe_load(spec_path.read_text())
    except OSError as exc:
        raise PlatformSpecError(f"cannot read platform spec {spec_path}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise PlatformSpecError(f"platform spec {spec_path} is not valid YAML: {exc}") from exc
    try:
        return PlatformSpec.model_validate(raw)
    except ValidationError as exc:
        raise PlatformSpecError(f"invalid platform spec {spec_path}:\n{exc}") from exc
