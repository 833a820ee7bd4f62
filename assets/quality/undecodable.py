"""A ``decodable`` asset check on every topic's archive: the day's undecodable records, counted.

The archive keeps a record it cannot decode (bad bytes, a value that is not a JSON object, a declared field of
the wrong type) under ``_undecodable/`` with its raw bytes, not among the day's rows, so the rules of the spec
never see it as a row. This check counts them with a Great Expectations suite of one expectation
(``ExpectTableRowCountToEqual(0)`` on the day's undecodable records): it fails, as a WARN (the records are
kept, nothing is lost), naming how many and where (partition, offset, the decoder's reason).
"""

from typing import Any

import dagster as dg

from assets.archive.keys import archive_asset_key
from assets.archive.layout import UNDECODABLE_DIR, ArchiveMissingError, day_dir, read_undecodable
from assets.platform_spec import PlatformSpec
from assets.quality.checks import checked_days, daily_check
from assets.quality.expectations import LabelledExpectation
from assets.quality.gx import great_expectations
from assets.quality.validation import SAMPLE_ROWS, run_expectations
from assets.resources import PlatformResource

__all__ = ["DECODABLE_CHECK", "undecodable_checks"]

DECODABLE_CHECK = "decodable"


def _decodable_check(spec: PlatformSpec, topic: str) -> dg.AssetChecksDefinition:
    @daily_check(
        spec,
        asset=archive_asset_key(topic),
        name=DECODABLE_CHECK,
        description=(f"Every record of {topic} archived for the day could be decoded: the count of records kept "
                     f"under {UNDECODABLE_DIR}/ (raw bytes and reason) must be 0 (WARN)."),
        blocking=False,
    )
    def check(context: dg.AssetCheckExecutionContext, platform: PlatformResource) -> dg.AssetCheckResult:
        spec = platform.spec()
        if spec.archive is None:
            raise dg.Failure("the platform spec has no archive section any more: reload the code location")
        (day,) = checked_days(context, topic)  # an archive run is one day (its assets backfill a run per day)
        root = spec.archive.root()
        try:
            records = read_undecodable(root, topic, day, ["partition", "offset", "error"])
        except ArchiveMissingError as exc:
            raise dg.Failure(f"check {DECODABLE_CHECK} of archive/{topic}: {exc}") from exc
        expectation = great_expectations().expectations.ExpectTableRowCountToEqual(value=0)
        expectation.meta = {"rule": DECODABLE_CHECK, "label": "undecodable_rows"}
        outcome = run_expectations(f"{topic}-{DECODABLE_CHECK}", [LabelledExpectation("undecodable_rows", expectation)],
                                   records)
        sample: list[dict[str, Any]] = [
            {"partition": int(row.partition), "offset": int(row.offset), "error": str(row.error)}
            for row in records.head(SAMPLE_ROWS).itertuples()]
        description = ("every record decoded" if outcome.success else
                       f"{len(records)} record(s) could not be decoded (kept under {UNDECODABLE_DIR}/)")
        context.log.info(f"{DECODABLE_CHECK} on {topic} {day}: {description}")
        return dg.AssetCheckResult(
            passed=outcome.success,
            severity=dg.AssetCheckSeverity.WARN,
            description=description,
            metadata={"day": day.isoformat(), "undecodable_rows": len(records),
                      "path": dg.MetadataValue.path(str(day_dir(root, topic, day) / UNDECODABLE_DIR)),
                      **({"sample undecodable_rows": dg.MetadataValue.json(sample)} if sample else {})},
        )

    return check


def undecodable_checks(spec: PlatformSpec) -> list[dg.AssetChecksDefinition]:
    """One ``decodable`` check per topic of ``spec`` (none without an archive section)."""
    return [_decodable_check(spec, topic) for topic in spec.topics] if spec.archive is not None else []
