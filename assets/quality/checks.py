"""Dagster asset checks built from the platform spec's ``quality`` rules, one per rule.

A rule on topic ``T`` checks the ``archive/T`` asset: it reads the archived day (only the columns it
needs; an ``absent`` rule also the raw bytes of the day's undecodable records) and validates it with Great
Expectations (:mod:`assets.quality.validation`). The same rules on an app's outputs check ``reprocessed/<app>``
(:class:`TopicDays` says where each topic's days are). The checks are partitioned as the assets they check (one partition per
day: an evaluation carries its day's partition key, and the UI shows each day's result), and the checked day is
the run's partition (checks run in the same run as the partition they follow; a backfill's range: every day of it,
one result). The checks come from the spec
the code location loaded; a run reads the rule, the topic and the archive location from the spec
again, through the ``platform`` resource. ``severity`` comes from the
rule, and ERROR rules are blocking: their failure stops assets downstream of the archive.

The check's metadata carries, per expectation, the failing row count (``failing <label>``), a
sample of failing rows located by Kafka partition and offset (``sample <label>``) or the observed
value (``observed <label>``), plus the GE statistics and a summary table.
"""


import warnings
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import dagster as dg

from assets.archive.keys import archive_asset_key, archive_partitions, partition_day
from assets.archive.layout import ArchiveMissingError, day_dir, day_row_count, read_day, read_undecodable
from assets.platform_spec import PlatformSpec, QualityRule
from assets.quality.expectations import expectations_for, row_count_bounds
from assets.quality.validation import RuleOutcome, columns_to_read, prepare_frame, run_expectations
from assets.resources import PlatformResource

__all__ = ["TopicDays", "checked_days", "daily_check", "quality_checks", "rule_check"]


def _describe(rule: QualityRule) -> str:
    what = {
        "not_null": f"no nulls in {', '.join(rule.columns)}",
        "range": f"{', '.join(rule.columns)} within [{rule.min}, {rule.max}]",
        "unique": f"({', '.join(rule.columns)}) unique",
        "absent": f"{', '.join(rule.columns)} never written",
        "freshness": f"newest {rule.columns[0] if rule.columns else 'timestamp'} at most "
                     f"{rule.max_age_minutes} min old",
        "row_count": f"rows within [{rule.min_ratio}, {rule.max_ratio}] x {rule.baseline}"
                     + "".join(f" - {t}" for t in rule.baseline_minus),
    }[rule.check]
    blocking = ", blocking" if rule.severity == "ERROR" else ""
    return f"Quality rule {rule.name} ({rule.check}, {rule.severity}{blocking}): {what}."


@dataclass(frozen=True)
class TopicDays:
    """Which asset a rule checks and where the days of each topic it reads are (in the archive's layout): the
    archive for the archive's checks; for a reprocessed app, its outputs' days there and its inputs' in the archive."""

    asset_key: Callable[[str], dg.AssetKey]
    """The checked asset, from the rule's topic."""
    root: Callable[[PlatformSpec, str], Path]
    """The directory holding a topic's days, from the spec the run reads."""
    by_timestamp: Callable[[str], bool] = lambda topic: False
    """True for a topic whose day directory holds what a day's run wrote rather than the day's records (a
    reprocessed app's output: the run of D - 1 reads up to D's frontier, so some records timestamped D are in D - 1's
    directory, and D's holds some of D + 1's): its day D is then the rows timestamped in D, from both directories."""


def _archive_root(spec: PlatformSpec, topic: str) -> Path:
    if spec.archive is None:
        raise dg.Failure("the platform spec has no archive section any more: reload the code location")
    return spec.archive.root()


ARCHIVE_DAYS = TopicDays(archive_asset_key, _archive_root)


def daily_check(spec: PlatformSpec, **kwargs: Any) -> Callable[[Callable[..., dg.AssetCheckResult]],
                                                                dg.AssetChecksDefinition]:
    """``dg.asset_check(**kwargs)`` partitioned by the archive's daily partitions (the checked assets' own), so each
    evaluation carries its day's partition key and the UI shows a check's result per day. Dagster 1.13 marks a
    partitioned check as a preview and warns once per check when the code location loads; the warning tells a user
    nothing they can act on, so it is silenced here, for these checks only. Without an archive section: unpartitioned."""
    partitions = archive_partitions(spec.archive) if spec.archive is not None else None

    def decorate(function: Callable[..., dg.AssetCheckResult]) -> dg.AssetChecksDefinition:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", dg.PreviewWarning)
            return dg.asset_check(partitions_def=partitions, **kwargs)(function)

    return decorate


def checked_days(context: dg.AssetCheckExecutionContext, topic: str,
                 asset_key: dg.AssetKey | None = None) -> list[date]:
    """The run's partitions (one day, or a backfill's range: the check's own partitions, :func:`daily_check`), else
    the latest materialized partition of ``asset_key`` (default: the topic's archive)."""
    if context.has_partition_key or context.has_partition_key_range:
        return sorted(partition_day(key) for key in context.partition_keys)
    key = asset_key or archive_asset_key(topic)
    event = context.instance.get_latest_materialization_event(key)
    partition = event.asset_materialization.partition if event and event.asset_materialization else None
    if partition is None:
        raise dg.Failure(f"{key.to_user_string()} has no materialized partition to check: materialize a day first, "
                         "or run the check with its partition")
    return [partition_day(partition)]


def _rows_timestamped_in(root: Path, topic: str, day: date, columns: list[str] | None) -> Any:
    """The rows of ``topic`` timestamped in ``day``, from its day directory and the one before (when it exists)."""
    import pandas as pd

    wanted = None if columns is None else list(dict.fromkeys([*columns, "timestamp"]))
    frames = [read_day(root, topic, day, wanted)]
    try:
        frames.insert(0, read_day(root, topic, day - timedelta(days=1), wanted))
    except ArchiveMissingError:
        pass  # the first reprocessed day
    frame = pd.concat(frames, ignore_index=True)
    start = pd.Timestamp(datetime(day.year, day.month, day.day, tzinfo=UTC))
    stamps = pd.to_datetime(frame["timestamp"], utc=True)
    return frame[(stamps >= start) & (stamps < start + pd.Timedelta(days=1))].reset_index(drop=True)


def _baseline_rows(spec: PlatformSpec, rule: QualityRule, day: date, days: TopicDays) -> tuple[int, dict[str, int]]:
    """The baseline's rows for the day less the ``baseline_minus`` rows, and each one's count."""
    def rows(topic: str) -> int:
        root = days.root(spec, topic)
        if days.by_timestamp(topic):
            return len(_rows_timestamped_in(root, topic, day, []))
        return day_row_count(root, topic, day)

    counts = {topic: rows(topic) for topic in [rule.baseline or "", *rule.baseline_minus]}
    baseline = counts[rule.baseline or ""] - sum(counts[t] for t in rule.baseline_minus)
    return baseline, counts


def _summary(outcome: RuleOutcome) -> str:
    failed = [e for e in outcome.expectations if not e.success]
    if not failed:
        return f"{len(outcome.expectations)} expectation(s) met on {outcome.rows} rows"
    parts = []
    for e in failed:
        if e.error:
            parts.append(f"{e.label}: {e.error}")
        elif e.unexpected_count is not None:
            parts.append(f"{e.label}: {e.unexpected_count} rows")
        else:
            parts.append(f"{e.label}: observed {e.observed}")
    return f"{len(failed)} of {len(outcome.expectations)} expectation(s) failed: " + "; ".join(parts)


def _table(outcome: RuleOutcome) -> str:
    lines = ["| expectation | success | failing rows | observed |", "|---|---|---|---|"]
    for e in outcome.expectations:
        failing = "" if e.unexpected_count is None else str(e.unexpected_count)
        observed = e.error or ("" if e.observed is None else str(e.observed))
        lines.append(f"| {e.label} | {e.success} | {failing} | {observed} |")
    return "\n".join(lines)


def _metadata(outcome: RuleOutcome, day: date, path: str) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "day": day.isoformat(),
        "path": dg.MetadataValue.path(path),
        "rows": outcome.rows,
        "failing_expectations": sum(not e.success for e in outcome.expectations),
        "expectations": dg.MetadataValue.md(_table(outcome)),
        "statistics": dg.MetadataValue.json(outcome.statistics),
    }
    for e in outcome.expectations:
        if e.unexpected_count is not None:
            metadata[f"failing {e.label}"] = e.unexpected_count
        if e.observed is not None:
            metadata[f"observed {e.label}"] = e.observed
        if e.sample:
            metadata[f"sample {e.label}"] = dg.MetadataValue.json(e.sample)
        if e.error:
            metadata[f"error {e.label}"] = e.error
    return metadata


def rule_check(spec: PlatformSpec, rule: QualityRule, days: TopicDays = ARCHIVE_DAYS) -> dg.AssetChecksDefinition:
    """The asset check of ``rule`` on the asset ``days`` names (default: the rule's topic's archive)."""
    baselines = [rule.baseline, *rule.baseline_minus] if rule.baseline else []
    asset_key = days.asset_key(rule.topic)

    @daily_check(
        spec,
        asset=asset_key,
        name=rule.name,
        description=_describe(rule),
        blocking=rule.severity == "ERROR",
        additional_deps=[days.asset_key(topic) for topic in baselines if days.asset_key(topic) != asset_key],
    )
    def check(context: dg.AssetCheckExecutionContext, platform: PlatformResource) -> dg.AssetCheckResult:
        current = platform.spec()
        checked = next((r for r in current.quality if r.name == rule.name), None)
        if checked is None:
            raise dg.Failure(f"quality rule {rule.name!r} is no longer in the platform spec {platform.path}: "
                             "reload the code location")
        topic = current.topics[checked.topic]
        root = days.root(current, checked.topic)

        def evaluate(day: date) -> tuple[RuleOutcome, dict[str, Any]]:
            extra: dict[str, Any] = {}
            baseline_rows = None
            undecodable = None
            try:
                frame = (_rows_timestamped_in(root, checked.topic, day, columns_to_read(checked, topic))
                         if days.by_timestamp(checked.topic) else
                         read_day(root, checked.topic, day, columns_to_read(checked, topic)))
                if checked.check == "absent":  # a leaked field must be seen in undecodable records too
                    undecodable = read_undecodable(root, checked.topic, day, ["partition", "offset", "value"])
                    extra = {"undecodable rows checked": len(undecodable)}
                if checked.check == "row_count":
                    baseline_rows, counts = _baseline_rows(current, checked, day, days)
                    low, high = row_count_bounds(checked, baseline_rows)
                    extra = {"baseline rows": dg.MetadataValue.json(counts), "expected rows": f"[{low}, {high}]"}
            except ArchiveMissingError as exc:
                raise dg.Failure(f"quality rule {checked.name!r}: {exc}") from exc
            expectations = expectations_for(checked, topic, day=day, now=datetime.now(UTC),
                                            baseline_rows=baseline_rows)
            outcome = run_expectations(checked.name, expectations, prepare_frame(checked, frame, undecodable))
            context.log.info(f"{checked.name} on {checked.topic} {day}: {_summary(outcome)}")
            return outcome, {**_metadata(outcome, day, str(day_dir(root, checked.topic, day))), **extra}

        evaluated = {day: evaluate(day) for day in checked_days(context, checked.topic, asset_key)}
        failed = [day for day, (outcome, _) in evaluated.items() if not outcome.success]
        shown = failed[0] if failed else max(evaluated)  # the first failing day's details, else the last day's
        outcome, metadata = evaluated[shown]
        if len(evaluated) > 1:  # a backfill's range: one result for all its days, each day's summary beside
            metadata = {**metadata, "days": dg.MetadataValue.json(
                {day.isoformat(): _summary(o) for day, (o, _) in evaluated.items()}),
                        "failing_days": [day.isoformat() for day in failed]}
        description = _summary(outcome) if len(evaluated) == 1 else (
            f"{len(evaluated) - len(failed)} of {len(evaluated)} days pass"
            + (f"; {shown}: {_summary(outcome)}" if failed else ""))
        return dg.AssetCheckResult(
            passed=not failed,
            severity=dg.AssetCheckSeverity[checked.severity],
            description=description,
            metadata=metadata,
        )

    return check


def quality_checks(spec: PlatformSpec) -> list[dg.AssetChecksDefinition]:
    """One asset check per quality rule of ``spec``, on the archive of the rule's topic."""
    return [rule_check(spec, rule) for rule in spec.quality]
