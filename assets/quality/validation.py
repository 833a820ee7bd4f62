"""Run a rule's expectations on a day of archive with Great Expectations 1.x, and read the result.

The GE way, in memory: an ephemeral context (analytics and progress bars off), a pandas data source
with a dataframe asset and a whole-dataframe batch definition, a suite holding the rule's
expectations and a validation definition run on the day's DataFrame. From the result come, per
expectation, ``success``, ``unexpected_count`` (or the observed value of a table-level expectation)
and a few failing rows located by Kafka partition and offset.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import TYPE_CHECKING, Any

import orjson

from assets.platform_spec import EXTRA_FIELDS_COLUMN, QualityRule, TopicSpec
from assets.quality.expectations import LabelledExpectation
from assets.quality.gx import great_expectations
from streaming.encryption import is_encrypted

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["SAMPLE_ROWS", "UNDECODABLE_MARK", "ExpectationOutcome", "RuleOutcome", "columns_to_read",
           "prepare_frame", "run_expectations", "undecodable_field"]

#: Failing rows kept per expectation (located by partition and offset).
SAMPLE_ROWS = 5
LOCATION_COLUMNS = ("partition", "offset")
#: The value an ``absent`` column takes for an undecodable record whose raw bytes name the field.
UNDECODABLE_MARK = "<named in an undecodable record>"


@dataclass(frozen=True)
class ExpectationOutcome:
    """What one expectation found."""

    label: str
    success: bool
    unexpected_count: int | None
    """Rows that failed (None for a table-level expectation such as row_count or freshness)."""
    observed: Any = None
    """The observed value of a table-level expectation (row count, newest timestamp)."""
    sample: list[dict[str, Any]] = field(default_factory=list)
    """Up to ``SAMPLE_ROWS`` failing rows: partition, offset and (unless hidden) the values."""
    error: str | None = None
    """Why Great Expectations could not evaluate the expectation, if it could not."""


@dataclass(frozen=True)
class RuleOutcome:
    """What a rule's expectations found on one day of archive."""

    rule: str
    success: bool
    rows: int
    expectations: list[ExpectationOutcome]
    statistics: dict[str, Any]


def columns_to_read(rule: QualityRule, topic: TopicSpec) -> list[str] | None:
    """The archive columns a rule needs (None: none, the row count is enough), plus partition and offset."""
    if rule.check == "row_count":
        return None
    if rule.check == "absent":
        declared = topic.columns()
        needed = [EXTRA_FIELDS_COLUMN, *(c for c in rule.columns if c in declared)]
    elif rule.check == "freshness":
        needed = list(rule.columns) or ["timestamp"]
    else:
        needed = list(rule.columns)
    return list(dict.fromkeys([*needed, *LOCATION_COLUMNS]))


def _extra_field(pairs: Any, name: str) -> str | None:
    """A field's JSON text from an ``extra_fields`` cell (a list of (name, JSON text) pairs), JSON null as None."""
    if pairs is None:
        return None
    text = dict(pairs).get(name)
    return None if text is None or text == "null" else text


def undecodable_field(raw: bytes | None, name: str) -> str | None:
    """Whether an undecodable record's raw value carries field ``name``: its JSON text when the value is a
    JSON object (JSON null counts as absent, as for decoded records), else :data:`UNDECODABLE_MARK` when the
    bytes hold ``"name":`` anywhere (broken JSON, a nested object), else None."""
    if raw is None:
        return None
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError:
        document = None
    if isinstance(document, dict):
        value = document.get(name)
        return None if value is None else orjson.dumps(value).decode()
    pattern = rb'"' + re.escape(orjson.dumps(name)[1:-1]) + rb'"\s*:'
    return UNDECODABLE_MARK if re.search(pattern, raw) else None


def prepare_frame(rule: QualityRule, frame: pd.DataFrame, undecodable: pd.DataFrame | None = None) -> pd.DataFrame:
    """The frame the expectations run on: record timestamps as UTC instants (Parquet written as
    INT96 reads back without a time zone), and for ``absent`` each column taken out of ``extra_fields``,
    with a row per ``undecodable`` record (partition, offset, raw ``value``) holding what
    :func:`undecodable_field` finds in its bytes: a leaked field is seen even in a record that went to
    ``_undecodable/`` because another field was mistyped."""
    import pandas as pd

    prepared = frame
    if "timestamp" in frame and pd.api.types.is_datetime64_dtype(frame["timestamp"]) \
            and frame["timestamp"].dt.tz is None:
        prepared = frame.assign(timestamp=frame["timestamp"].dt.tz_localize("UTC"))
    if rule.check != "absent":
        return prepared
    prepared = prepared.copy()
    extra = prepared.get(EXTRA_FIELDS_COLUMN)
    for column in rule.columns:
        if column in frame:  # a declared string column
            prepared[column] = frame[column].map(in_clear)
        elif extra is None:
            prepared[column] = None
        else:
            prepared[column] = extra.map(lambda pairs, name=column: in_clear(_extra_field(pairs, name)))
    if undecodable is not None and len(undecodable):
        raw = undecodable[[*LOCATION_COLUMNS]].copy()
        for column in rule.columns:
            raw[column] = undecodable["value"].map(
                lambda value, name=column: in_clear(undecodable_field(value, name)))
        prepared = pd.concat([prepared, raw], ignore_index=True)
    return prepared


def in_clear(value: Any) -> Any:
    """``value`` unless it is encrypted (the wire form, as a string or as its JSON text), which is None: what an
    ``absent`` rule requires is no value *in clear*."""
    if isinstance(value, str):
        text = value
        if text.startswith('"'):
            try:
                text = orjson.loads(text)
            except orjson.JSONDecodeError:
                return value
        if is_encrypted(text):
            return None
    return value


def _jsonable(value: Any) -> Any:
    """A value from pandas/numpy as plain JSON (numbers, strings, lists, None)."""
    if value is None:
        return None
    if isinstance(value, (datetime, date)):  # pandas Timestamps included
        return value.isoformat()
    if hasattr(value, "item") and not isinstance(value, (list, tuple, dict)):
        value = value.item()  # numpy scalars
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def _ephemeral_context() -> Any:
    gx = great_expectations()
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        InMemoryStoreBackendDefaults,
        ProgressBarsConfig,
    )

    config = DataContextConfig(
        analytics_enabled=False,
        store_backend_defaults=InMemoryStoreBackendDefaults(init_temp_docs_sites=False),
        progress_bars=ProgressBarsConfig(globally=False, metric_calculations=False),
    )
    return gx.get_context(mode="ephemeral", project_config=config)


def _exception_message(info: dict[str, Any]) -> str | None:
    """The message of an exception GE caught, from its flat or per-metric ``exception_info``."""
    if "raised_exception" in info:
        return info.get("exception_message") if info["raised_exception"] else None
    for per_metric in info.values():
        if isinstance(per_metric, dict) and per_metric.get("raised_exception"):
            return per_metric.get("exception_message")
    return None


def _outcome(expectation: LabelledExpectation, result: Any, locations: Sequence[str]) -> ExpectationOutcome:
    details = result.result or {}
    error = _exception_message(result.exception_info or {})
    sample = []
    for row in (details.get("partial_unexpected_index_list") or [])[:SAMPLE_ROWS]:
        kept = row if expectation.shows_values else {k: v for k, v in row.items() if k in locations}
        sample.append({str(k): _jsonable(v) for k, v in kept.items()})
    count = details.get("unexpected_count")
    return ExpectationOutcome(
        label=expectation.label,
        success=bool(result.success),
        unexpected_count=None if count is None else int(count),
        observed=_jsonable(details.get("observed_value")),
        sample=sample,
        error=error,
    )


def run_expectations(name: str, expectations: list[LabelledExpectation], frame: pd.DataFrame) -> RuleOutcome:
    """Validate ``frame`` against ``expectations`` (one suite named ``name``) and summarize the result."""
    gx = great_expectations()
    context = _ephemeral_context()
    batch = (context.data_sources.add_pandas("archive")
             .add_dataframe_asset(name)
             .add_batch_definition_whole_dataframe("day"))
    suite = context.suites.add(gx.ExpectationSuite(name=name))
    for labelled in expectations:
        suite.add_expectation(labelled.expectation)
    validation = context.validation_definitions.add(gx.ValidationDefinition(name=name, data=batch, suite=suite))
    locations = [c for c in LOCATION_COLUMNS if c in frame.columns]
    result_format: dict[str, Any] = {"result_format": "SUMMARY", "partial_unexpected_count": SAMPLE_ROWS}
    if locations:
        result_format["unexpected_index_column_names"] = locations
    result = validation.run(batch_parameters={"dataframe": frame}, result_format=result_format)

    by_label = {labelled.label: labelled for labelled in expectations}
    outcomes = {}
    for expectation_result in result.results:
        label = expectation_result.expectation_config.meta["label"]
        outcomes[label] = _outcome(by_label[label], expectation_result, locations)
    ordered = [outcomes[labelled.label] for labelled in expectations]
    return RuleOutcome(rule=name, success=bool(result.success), rows=len(frame), expectations=ordered,
                       statistics=_jsonable(dict(result.statistics)))
