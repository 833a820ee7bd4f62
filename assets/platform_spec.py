"""The platform spec (``platform/platform.yaml``): apps, topics, stores, quality rules, clusters.

One validated model of what the platform runs. Every model forbids unknown keys, and cross
references are checked (an app's topic, a store's ``partitions_from``, a quality rule's topic and
columns must be declared; co-partitioned topics must agree on their partition count), so a typo
fails loudly when the code location loads instead of becoming a silent default.

Topics declare how their records decode (``key`` and ``value`` formats, and for JSON values the
``fields``); that gives every topic's archive its columns (:meth:`TopicSpec.columns`), which the
quality rules are checked against.
"""

from __future__ import annotations

import os
import re
from datetime import date
from pathlib import Path
from typing import Literal, Self

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

from streaming.naming import changelog_topic
from streaming.topic_generations import TopicGenerations
from streaming.yaml_files import DuplicateKeyError, load_yaml

__all__ = [
    "ARCHIVE_METADATA_COLUMNS",
    "EXTRA_FIELDS_COLUMN",
    "AppSpec",
    "ArchiveSpec",
    "ClusterSpec",
    "ColumnType",
    "FieldType",
    "PlatformSpec",
    "PlatformSpecError",
    "QualityRule",
    "RecordFormat",
    "ReprocessSpec",
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


RecordFormat = Literal["string", "long", "integer", "double", "json", "bytes"]
"""How a key or value is written: the built-in serde of that name (``Serdes.String()``, ...)."""

FieldType = Literal["string", "long", "double", "boolean", "json"]
"""The type of a JSON field in the archive; ``json`` keeps the field as JSON text."""

ColumnType = Literal["string", "long", "integer", "double", "boolean", "json", "bytes", "timestamp", "map"]
"""The type of an archive column: a record format, a field type, the record timestamp, or ``map``
(``extra_fields``: field name -> JSON text)."""

#: Columns every archived record carries, after its key and value columns (as Spark's Kafka source).
ARCHIVE_METADATA_COLUMNS: dict[str, ColumnType] = {
    "topic": "string", "partition": "integer", "offset": "long", "timestamp": "timestamp",
}
#: The archive column holding a JSON value's undeclared fields (name -> JSON text), so none is lost.
EXTRA_FIELDS_COLUMN = "extra_fields"

NUMERIC_COLUMN_TYPES: frozenset[str] = frozenset({"long", "integer", "double"})


class TopicSpec(_Model):
    """A topic the platform owns: partitions, how its records decode, and its creation ``config``.

    ``key`` and ``value`` name the serde the apps write with (Brook's defaults: ``string`` keys,
    ``json`` values). A ``json`` value lists its ``fields``, as names or as ``name: type``; an
    untyped field is archived as JSON text. ``config`` is set at creation (never rely on broker
    defaults).
    """

    partitions: PositiveInt
    key: RecordFormat = "string"
    value: RecordFormat = "json"
    fields: dict[str, FieldType] = Field(default_factory=dict)
    description: str = ""
    config: dict[str, str] = Field(default_factory=dict)
    max_disorder_minutes: int | None = Field(default=None, ge=0, le=1440)
    """This topic's bound for the archive, when it differs from ``archive.max_disorder_minutes``: an
    output several tasks write into one partition (null keys, another partitioning) interleaves their
    event times, so its disorder is as large as the tasks' lag behind each other."""

    def disorder_bound_minutes(self, archive: ArchiveSpec) -> int:
        """The archive's disorder bound for this topic: its own ``max_disorder_minutes``, else the archive's."""
        return archive.max_disorder_minutes if self.max_disorder_minutes is None else self.max_disorder_minutes

    @field_validator("fields", mode="before")
    @classmethod
    def _names_are_untyped_fields(cls, fields: object) -> object:
        """``[a, b]`` is ``{a: json, b: json}``; ``{a: }`` (no type) is ``{a: json}``."""
        if isinstance(fields, list):
            return {name: "json" for name in fields}
        if isinstance(fields, dict):
            return {name: "json" if kind is None else kind for name, kind in fields.items()}
        return fields

    @model_validator(mode="after")
    def _fields_fit_the_value(self) -> Self:
        if self.fields and self.value != "json":
            raise ValueError(f"fields are declared for JSON values only, but value is {self.value!r}")
        reserved = {"key", *ARCHIVE_METADATA_COLUMNS, EXTRA_FIELDS_COLUMN}
        clashes = sorted(reserved & set(self.fields))
        if clashes:
            raise ValueError(f"fields {clashes} clash with archive columns {sorted(reserved)}")
        return self

    def columns(self) -> dict[str, ColumnType]:
        """The archive's columns and their types: key, the value (its fields for a JSON value with
        fields, else ``value``), ``extra_fields`` for a JSON value with fields, then topic, partition,
        offset, timestamp."""
        columns: dict[str, ColumnType] = {"key": self.key}
        if self.value == "json" and self.fields:
            columns.update(self.fields)
            columns[EXTRA_FIELDS_COLUMN] = "map"
        else:
            columns["value"] = self.value
        columns.update(ARCHIVE_METADATA_COLUMNS)
        return columns


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
    topic_generations: dict[str, StrictInt] = Field(default_factory=dict)
    """Partition scaling: ``{logical topic: generation}`` for the app's topics that moved to a new generation
    (``orders: 2`` -> ``orders.v2``; :mod:`streaming.topic_generations`): its inputs and outputs, and its internal
    topics by their logical names (``<application_id>-<store>-changelog``, ``...-repartition``,
    ``<application_id>-<n>-stream-time``). A topic not named is at generation 1 (its logical name). Written by the
    scaling job; ``brook worker run`` hands it to the runtime as config key ``topic.generations``."""

    def changelog_topic(self, store: str) -> str:
        """``<application_id>-<store>-changelog``, as Kafka Streams names it (the logical name)."""
        return changelog_topic(self.application_id, store)

    @property
    def generations(self) -> TopicGenerations:
        """The resolver from the app's logical topics to their physical generations."""
        return TopicGenerations(self.topic_generations)

    def physical_topic(self, logical: str) -> str:
        """The physical topic that carries the app's logical topic ``logical`` now."""
        return self.generations.physical(logical)

    def physical_changelog(self, store: str) -> str:
        """The physical changelog topic of ``store`` now."""
        return self.generations.changelog(self.application_id, store)

    def generation_problems(self, name: str) -> list[str]:
        """One line per bad ``topic_generations`` entry, naming app ``name`` and the topic: not a legal map, a
        topic without generations (metadata, epoch, dead letters), or a topic that is neither the app's input or
        output nor one of its internal topics (``<application_id>-...``)."""
        try:
            self.generations.check_application(self.application_id)
        except (ValueError, TypeError) as exc:
            return [f"app {name!r}: topic_generations: {str(exc).removeprefix(f'application {self.application_id!r}: ')}"]
        own = {*self.inputs, *self.outputs}
        return [f"app {name!r}: topic_generations names {topic!r}, which is neither an input or output of the app "
                f"nor one of its internal topics ({self.application_id}-...)"
                for topic in self.topic_generations
                if topic not in own and not topic.startswith(f"{self.application_id}-")]


QualityCheck = Literal["not_null", "range", "unique", "absent", "freshness", "row_count"]

#: The arguments each check takes besides name, topic, check and severity.
_CHECK_ARGUMENTS: dict[str, frozenset[str]] = {
    "not_null": frozenset({"columns"}),
    "range": frozenset({"columns", "min", "max"}),
    "unique": frozenset({"columns"}),
    "absent": frozenset({"columns"}),
    "freshness": frozenset({"columns", "max_age_minutes"}),
    "row_count": frozenset({"baseline", "baseline_minus", "min_ratio", "max_ratio"}),
}


class QualityRule(_Model):
    """A data-quality rule on a topic's archive, checked by a Great Expectations asset check.

    - ``not_null``: no null in any of ``columns``;
    - ``range``: every non-null value of ``columns`` within ``[min, max]`` (numeric columns);
    - ``unique``: no two rows share the values of ``columns`` (together: a compound key);
    - ``absent``: ``columns`` never carry a value in clear: null, missing or encrypted
      (``streaming.encryption``'s ``enc:v1:<key id>:<base64>``) only. For fields that must never be written
      in clear, e.g. a card number: an undeclared one is kept in the archive's ``extra_fields``, so a leaked
      one is seen; a declared one must be a ``string``; the check also looks in the raw bytes of the day's
      undecodable records;
    - ``freshness``: the newest ``columns[0]`` (default: the record ``timestamp``; else an epoch-ms
      field) is at most ``max_age_minutes`` older than the end of the day checked, or than now for
      today;
    - ``row_count``: the day's rows are within ``[min_ratio, max_ratio]`` times the rows of the
      ``baseline`` topic's archive for the same day, less the rows of each ``baseline_minus``
      archive (e.g. order lines against orders less rejected orders).

    ``severity: ERROR`` makes the check blocking: a failure stops assets downstream of the archive.
    """

    name: str = Field(pattern=r"^[A-Za-z0-9_]+$")
    topic: str
    check: QualityCheck
    columns: list[str] = Field(default_factory=list)
    min: float | None = None
    max: float | None = None
    max_age_minutes: PositiveInt | None = None
    baseline: str | None = None
    baseline_minus: list[str] = Field(default_factory=list)
    min_ratio: NonNegativeFloat | None = None
    max_ratio: NonNegativeFloat | None = None
    severity: Literal["WARN", "ERROR"] = "ERROR"

    @model_validator(mode="after")
    def _arguments_fit_check(self) -> Self:
        given = {name for name in self.model_fields_set if name not in ("name", "topic", "check", "severity")}
        extra = sorted(given - _CHECK_ARGUMENTS[self.check])
        if extra:
            raise ValueError(f"rule {self.name!r}: {extra} do not apply to check {self.check!r}")
        if self.check in ("not_null", "range", "unique", "absent") and not self.columns:
            raise ValueError(f"rule {self.name!r}: check {self.check!r} needs columns")
        if self.check == "range" and self.min is None and self.max is None:
            raise ValueError(f"rule {self.name!r}: check 'range' needs min and/or max")
        if self.check == "range" and self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"rule {self.name!r}: min {self.min} is above max {self.max}")
        if self.check == "freshness" and self.max_age_minutes is None:
            raise ValueError(f"rule {self.name!r}: check 'freshness' needs max_age_minutes")
        if self.check == "freshness" and len(self.columns) > 1:
            raise ValueError(f"rule {self.name!r}: check 'freshness' takes at most one column")
        if self.check == "row_count":
            if self.baseline is None:
                raise ValueError(f"rule {self.name!r}: check 'row_count' needs baseline (a topic)")
            if self.min_ratio is None and self.max_ratio is None:
                raise ValueError(f"rule {self.name!r}: check 'row_count' needs min_ratio and/or max_ratio")
            if self.min_ratio is not None and self.max_ratio is not None and self.min_ratio > self.max_ratio:
                raise ValueError(f"rule {self.name!r}: min_ratio {self.min_ratio} is above max_ratio {self.max_ratio}")
        return self

    def column_problems(self, topics: dict[str, TopicSpec]) -> list[str]:
        """What is wrong with this rule's topic and columns against the declared ``topics``."""
        if self.topic not in topics:
            return [f"quality rule {self.name!r}: topic {self.topic!r} is not declared"]
        problems = [f"quality rule {self.name!r}: baseline topic {name!r} is not declared"
                    for name in [self.baseline or "", *self.baseline_minus] if name and name not in topics]
        topic = topics[self.topic]
        columns = topic.columns()
        if self.check == "absent" and EXTRA_FIELDS_COLUMN not in columns:
            problems.append(f"quality rule {self.name!r}: absent needs topic {self.topic!r} to have a JSON value "
                            f"with declared fields (undeclared ones are archived in {EXTRA_FIELDS_COLUMN})")
        for column in self.columns:
            kind = columns.get(column)
            if self.check == "absent":
                if kind is not None and kind != "string":
                    problems.append(f"quality rule {self.name!r}: column {column!r} of topic {self.topic!r} "
                                    f"is declared as {kind}: absent checks a string column (clear or encrypted) "
                                    "or an undeclared field")
            elif kind is None:
                problems.append(f"quality rule {self.name!r}: topic {self.topic!r} has no column {column!r} "
                                f"(its columns: {sorted(columns)})")
            elif self.check == "range" and kind not in NUMERIC_COLUMN_TYPES:
                problems.append(f"quality rule {self.name!r}: range needs a numeric column, "
                                f"{column!r} of topic {self.topic!r} is {kind}")
            elif self.check == "freshness" and kind not in ("timestamp", "long"):
                problems.append(f"quality rule {self.name!r}: freshness needs the timestamp or an epoch-ms "
                                f"long column, {column!r} of topic {self.topic!r} is {kind}")
        return problems


class ArchiveSpec(_Model):
    """Where and from when topics are archived into daily Parquet partitions.

    ``location`` is a local directory (relative paths are relative to the checkout); day ``D`` of
    topic ``T`` is ``<location>/T/date=D/``. ``max_disorder_minutes`` is the assumption the archive
    relies on to find a day's records: in every partition, a record's timestamp is at most this much
    behind the largest timestamp before it (the archive verifies it on what it reads).
    """

    location: str = Field(default=".brook/archive", min_length=1)
    start_date: date
    max_disorder_minutes: int = Field(default=15, ge=0, le=1440)

    @field_validator("location")
    @classmethod
    def _local_path(cls, location: str) -> str:
        if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", location):
            raise ValueError(f"archive location {location!r}: only a local directory is supported")
        return location

    def root(self) -> Path:
        """The archive directory, absolute."""
        path = Path(self.location).expanduser()
        return path if path.is_absolute() else repo_root() / path


class ReprocessSpec(_Model):
    """Where batch reprocessing (the ``reprocessed/<app>`` assets) writes each day's outputs, in the archive's
    layout (``<location>/<app>/<topic>/date=D/``), and the state one day's run hands the next
    (``<location>/<app>/_state/``); how many records a task processes between two commits (``chunk``); and whether
    the outputs are also produced to Kafka (``publish``)."""

    location: str = Field(default=".brook/reprocessed", min_length=1)
    chunk: PositiveInt = 1000
    publish: bool = False
    """Produce each reprocessed day's outputs to Kafka too (``assets.reprocess.publish``), to ``<topic>`` plus
    ``publish_suffix``: a side topic by default, the output topics themselves with an empty suffix."""
    publish_suffix: str = ".reprocessed"

    @field_validator("location")
    @classmethod
    def _local_path(cls, location: str) -> str:
        if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", location):
            raise ValueError(f"reprocess location {location!r}: only a local directory is supported")
        return location

    def root(self) -> Path:
        """The reprocessing directory, absolute."""
        path = Path(self.location).expanduser()
        return path if path.is_absolute() else repo_root() / path


class GrowthSpec(_Model):
    """When the sensor ``compact_grown_changelogs`` compacts a store between nightly compactions: its changelog
    grew ``records`` records past the newest snapshot, or ``ratio`` times the snapshot's keys; at most once
    every ``at_most_every_minutes`` per store. The sensor looks every ``check_every_seconds``."""

    records: PositiveInt = 1_000_000
    ratio: PositiveFloat = 2.0
    at_most_every_minutes: PositiveInt = 60
    check_every_seconds: PositiveInt = 300


class ScalingSpec(_Model):
    """When the sensor ``plan_scaling_on_lag`` plans a scaling (a dry run; it never stops workers): an app's
    consumer lag stayed at or over ``lag_records`` for ``sustained_minutes``. The plan's partition count keeps up
    with the measured input rate and drains the lag within ``drain_minutes``, with ``headroom``, at most
    ``max_partitions`` (:mod:`assets.lag`). The sensor samples the lag every ``check_every_seconds`` (keep it well
    under ``sustained_minutes``)."""

    lag_records: PositiveInt = 100_000
    sustained_minutes: PositiveFloat = 15
    headroom: PositiveFloat = 1.5
    drain_minutes: PositiveFloat = 30
    max_partitions: PositiveInt = 64
    check_every_seconds: PositiveInt = 60


class SnapshotsSpec(_Model):
    """Where changelog compaction writes store snapshots (and workers read them), how many to keep, and for how
    long a superseded one is kept anyway (``prune_grace_minutes``).

    ``location``: a local directory (relative paths are relative to the repository root) or a URI
    the cluster can reach: ``s3a://bucket/prefix`` (Spark's S3A connector; read as ``s3://`` by
    pyarrow), ``hdfs://namenode/path``, ``file:///abs/path``.
    """

    location: str = Field(default=".brook/snapshots", min_length=1)
    keep: PositiveInt = 3
    prune_grace_minutes: NonNegativeFloat = 10
    """A snapshot past ``keep`` is deleted only once the snapshot after it is this old: a worker that picked it as
    the newest may still be loading it (a worker that loses it mid-load falls back to an older snapshot or the
    whole changelog, but never runs on a short one)."""
    growth: GrowthSpec = Field(default_factory=GrowthSpec)
    """Compaction between the nightly ones, for a changelog that grew fast (``assets.compaction_growth``)."""

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
    archive: ArchiveSpec | None = None
    """No section, no archive (and so no quality rules: they check the archive)."""
    quality: list[QualityRule] = Field(default_factory=list)
    snapshots: SnapshotsSpec = Field(default_factory=SnapshotsSpec)
    scaling: ScalingSpec = Field(default_factory=ScalingSpec)
    reprocess: ReprocessSpec | None = None
    """No section, no ``reprocessed/<app>`` assets (they replay the archive: it needs an archive section)."""

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
            errors.extend(app.generation_problems(name))
        errors.extend(self._generation_conflicts())
        if self.quality and self.archive is None:
            errors.append("quality rules check the topics' archive: add an archive section (start_date at least)")
        if self.reprocess is not None and self.archive is None:
            errors.append("reprocessing replays the topics' archive: add an archive section (start_date at least)")
        for rule in self.quality:
            errors.extend(rule.column_problems(self.topics))
        if len({rule.name for rule in self.quality}) != len(self.quality):
            errors.append("quality rule names must be unique")
        if errors:
            raise ValueError("; ".join(errors))
        return self

    def _generation_conflicts(self) -> list[str]:
        """A declared topic that two apps read or write must be at the same generation in both."""
        seen: dict[str, tuple[str, int]] = {}
        errors = []
        for name, app in self.apps.items():
            for topic in dict.fromkeys([*app.inputs, *app.outputs]):
                generation = app.topic_generations.get(topic, 1)
                first = seen.setdefault(topic, (name, generation))
                if first[1] != generation:
                    errors.append(f"app {name!r}: topic {topic!r} is at generation {generation}, but app "
                                  f"{first[0]!r} uses it at generation {first[1]}")
        return errors

    def physical_topic(self, topic: str) -> str:
        """The physical topic that carries the declared topic ``topic`` now: the generation the apps that read or
        write it give it (they agree, see the validation), else ``topic`` itself."""
        for app in self.apps.values():
            if topic in app.inputs or topic in app.outputs:
                return app.physical_topic(topic)
        return topic

    def app_of(self, application_id: str) -> tuple[str, AppSpec] | None:
        """The app (name, spec) whose application.id is ``application_id``, if the spec declares one."""
        return next(((name, app) for name, app in self.apps.items() if app.application_id == application_id), None)

    def cluster(self, name: str | None = None) -> ClusterSpec:
        """The named cluster, else ``$BROOK_CLUSTER``, else ``default_cluster``."""
        chosen = name or os.environ.get("BROOK_CLUSTER") or self.default_cluster
        try:
            return self.clusters[chosen]
        except KeyError:
            known = sorted(self.clusters)
            raise PlatformSpecError(f"unknown cluster {chosen!r}; declared: {known}") from None

    def archive_closing_minutes(self) -> int:
        """How long after a day ends its archive is final: the largest disorder bound of any topic."""
        if self.archive is None:
            return 0
        archive = self.archive
        return max((topic.disorder_bound_minutes(archive) for topic in self.topics.values()), default=0)

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
        raw = load_yaml(spec_path.read_text())
    except OSError as exc:
        raise PlatformSpecError(f"cannot read platform spec {spec_path}: {exc}") from exc
    except DuplicateKeyError as exc:
        raise PlatformSpecError(f"platform spec {spec_path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise PlatformSpecError(f"platform spec {spec_path} is not valid YAML: {exc}") from exc
    try:
        return PlatformSpec.model_validate(raw)
    except ValidationError as exc:
        raise PlatformSpecError(f"invalid platform spec {spec_path}:\n{exc}") from exc
