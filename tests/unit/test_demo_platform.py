"""``make demo``'s platform half without a broker or Spark: its spec, the choice of the reprocessed day, and a failed
equality failing the demo (``make demo`` itself runs everything; it is not part of the suite)."""

from __future__ import annotations

from pathlib import Path

import pytest

from apps.demo import report_platform
from apps.demo_platform import PlatformSummary, ReprocessedDaySummary, demo_spec, reprocess_one_day
from assets.platform_spec import load_platform_spec
from assets.reprocess.compare import compare_outputs


def test_the_demo_spec_keeps_snapshots_archive_and_reprocessed_days_under_the_work_dir(tmp_path: Path) -> None:
    spec = load_platform_spec(demo_spec(tmp_path))
    assert spec.archive is not None and spec.reprocess is not None
    assert spec.archive.root() == tmp_path / "archive" and spec.reprocess.root() == tmp_path / "reprocessed"
    assert str(tmp_path / "snapshots") == spec.snapshots.location


def test_the_reprocessed_day_is_the_archives_first_and_needs_the_day_after(tmp_path: Path) -> None:
    spec = load_platform_spec(demo_spec(tmp_path))

    def no_run(*_: object) -> None:
        raise AssertionError("no day to reprocess: nothing is materialized")

    done = reprocess_one_day(no_run, "127.0.0.1:1", spec, ["2023-11-14"])
    assert done.day == "2023-11-14" and not done.equal
    assert "the day after must both be order days" in done.error


def _platform(reprocessed: ReprocessedDaySummary) -> PlatformSummary:
    return PlatformSummary(steps=[("reprocessed/orders", "2023-11-14", "", 1.0)],
                           checks=[("archive/orders", "decodable", "2023-11-14", "ERROR", True, "")],
                           restore={"snapshot_keys": 1, "tail_records": 0, "seconds": 1.0, "equal": True},
                           reprocessed=reprocessed)


def test_a_reprocessed_day_unequal_to_the_live_output_fails_the_demo_naming_the_difference(capsys: pytest.CaptureFixture[str]) -> None:
    live = [(b"u1", b'{"n": 1}', 1_000), (b"u1", b'{"n": 2}', 2_000)]
    day = ReprocessedDaySummary("orders", "2023-11-14", "2023-11-15 00:00", "empty state (first day)", 2,
                                {"order-lines": 2}, 1.0)
    day.comparisons = [compare_outputs(live, live, "order-lines")]
    assert report_platform(_platform(day), 1.0)
    day.comparisons = [compare_outputs(live[::-1], live, "order-lines")]
    assert not report_platform(_platform(day), 1.0)
    out = capsys.readouterr().out
    assert "FAILED" in out and "order-lines" in out and "key 'u1': record 1" in out
