"""A quality rule of the platform spec as Great Expectations 1.x expectations.

Each rule becomes one or more expectations, each with a short label (``not_null(order_id)``,
``unique(order_id, item)``, ``row_count``) that names it in the check's metadata:

=============  =================================================================================
rule           expectations
=============  =================================================================================
not_null       ``ExpectColumnValuesToNotBeNull`` per column
range          ``ExpectColumnValuesToBeBetween`` per column (nulls are not_null's business)
unique         ``ExpectColumnValuesToBeUnique`` (one column) / ``ExpectCompoundColumnsToBeUnique``
absent         ``ExpectColumnValuesToBeNull`` per column, on the column (declared, or taken from ``extra_fields``)
               with encrypted values as null: what it requires is no value in clear
freshness      ``ExpectColumnMaxToBeBetween`` with ``min_value`` = reference time - max age
row_count      ``ExpectTableRowCountToBeBetween`` with bounds from the baseline's rows
=============  =================================================================================

Great Expectations is imported on the first call (it takes seconds to import).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from assets.platform_spec import QualityRule, TopicSpec
from assets.quality.gx import great_expectations

__all__ = ["LabelledExpectation", "expectations_for", "freshness_reference", "row_count_bounds"]


@dataclass(frozen=True)
class LabelledExpectation:
    """One expectation of a rule, with the label the check's metadata shows it under."""

    label: str
    expectation: Any
    """A ``great_expectations.expectations.Expectation``."""
    shows_values: bool = True
    """Whether failing rows in the sample show the column's values (not for ``absent``: a leaked
    field is often sensitive, so the sample shows only where it is: partition and offset)."""


def freshness_reference(day: date, now: datetime) -> datetime:
    """The time a day's newest record is compared with: the end of the day, or now for a day not over."""
    end_of_day = datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(days=1)
    return min(now, end_of_day)


def row_count_bounds(rule: QualityRule, baseline_rows: int) -> tuple[int | None, int | None]:
    """``(min, max)`` rows a day may hold: the rule's ratios times the baseline's rows (whole rows)."""
    low = math.ceil(rule.min_ratio * baseline_rows - 1e-9) if rule.min_ratio is not None else None
    high = math.floor(rule.max_ratio * baseline_rows + 1e-9) if rule.max_ratio is not None else None
    return low, high


def expectations_for(rule: QualityRule, topic: TopicSpec, *, day: date, now: datetime,
                     baseline_rows: int | None = None) -> list[LabelledExpectation]:
    """The expectations checking ``rule`` on ``day``'s archive of ``topic``.

    ``now`` sets freshness's reference for today's partition; ``baseline_rows`` (row_count only) is
    the baseline archive's rows for the day, less the rows of the ``baseline_minus`` archives.
    """
    gxe = great_expectations().expectations

    def labelled(label: str, expectation: Any, shows_values: bool = True) -> LabelledExpectation:
        expectation.meta = {"rule": rule.name, "label": label}
        return LabelledExpectation(label, expectation, shows_values)

    if rule.check == "not_null":
        return [labelled(f"not_null({c})", gxe.ExpectColumnValuesToNotBeNull(column=c)) for c in rule.columns]
    if rule.check == "range":
        return [labelled(f"range({c})", gxe.ExpectColumnValuesToBeBetween(column=c, min_value=rule.min,
                                                                          max_value=rule.max))
                for c in rule.columns]
    if rule.check == "unique":
        label = f"unique({', '.join(rule.columns)})"
        if len(rule.columns) == 1:
            return [labelled(label, gxe.ExpectColumnValuesToBeUnique(column=rule.columns[0]))]
        return [labelled(label, gxe.ExpectCompoundColumnsToBeUnique(column_list=list(rule.columns)))]
    if rule.check == "absent":
        return [labelled(f"absent({c})", gxe.ExpectColumnValuesToBeNull(column=c), shows_values=False)
                for c in rule.columns]
    if rule.check == "freshness":
        column = rule.columns[0] if rule.columns else "timestamp"
        oldest = freshness_reference(day, now) - timedelta(minutes=rule.max_age_minutes or 0)
        bound: Any = oldest if topic.columns()[column] == "timestamp" else int(oldest.timestamp() * 1000)
        return [labelled(f"freshness({column})", gxe.ExpectColumnMaxToBeBetween(column=column, min_value=bound))]
    if rule.check == "row_count":
        if baseline_rows is None:
            raise ValueError(f"rule {rule.name!r}: row_count needs the baseline's rows")
        low, high = row_count_bounds(rule, baseline_rows)
        return [labelled("row_count", gxe.ExpectTableRowCountToBeBetween(min_value=low, max_value=high))]
    raise ValueError(f"rule {rule.name!r}: unknown check {rule.check!r}")
