"""The sensor ``compact_grown_changelogs``: a changelog that grew past a threshold since its newest snapshot
requests that store's compaction, at most once per ``snapshots.growth.at_most_every_minutes`` per store.

Growth is what a restore would replay on top of the newest snapshot: per changelog partition, the records
from the offset the snapshot covers (its manifest's next offset; the partition's earliest offset without a
snapshot) to the partition's end, found by :func:`streaming.admin.watermarks` (exact on the embedded broker,
whose ListOffsets "latest" is not). A store is due when that count reaches ``snapshots.growth.records``, or
when it is ``snapshots.growth.ratio`` times the keys the snapshot holds (a small store whose changelog churns).
Nightly compaction (``nightly_compaction``) stays; this one compacts in between, where the restore time grows.

The cursor (JSON: ``"<app>/<store>"`` -> the epoch seconds of the last request) keeps the rate limit; each run
key also names the store and the hour bucket, so the daemon never launches two in one bucket even if the
cursor is reset. Quiet otherwise: the skip reason names the store that grew most and by how much. Starts
stopped, like the schedules: ``dagster sensor start compact_grown_changelogs`` or the switch in the UI.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import dagster as dg

from assets.platform_spec import PlatformSpec, repo_root
from assets.resources import KafkaResource
from streaming.admin import partition_counts, watermarks
from streaming.state.snapshots import latest_manifest

__all__ = ["GROWTH_SENSOR", "ChangelogGrowth", "changelog_growth", "growth_sensor"]

GROWTH_SENSOR = "compact_grown_changelogs"


@dataclass(frozen=True)
class ChangelogGrowth:
    """How far the changelog of ``app``'s store ``store`` is past its newest snapshot."""

    app: str
    store: str
    changelog: str
    since_snapshot: int
    """Records a restore replays on top of the snapshot (all of them without one)."""
    snapshot_id: str | None
    snapshot_keys: int

    @property
    def ratio(self) -> float | None:
        """``since_snapshot`` per key of the snapshot; None without a snapshot (or an empty one)."""
        return self.since_snapshot / self.snapshot_keys if self.snapshot_keys else None

    def due(self, records: int, ratio: float) -> bool:
        """Whether the growth reaches ``records``, or ``ratio`` times the snapshot's keys."""
        return self.since_snapshot >= records or (self.ratio is not None and self.ratio >= ratio)

    def describe(self) -> str:
        base = (f"snapshot {self.snapshot_id} ({self.snapshot_keys} keys, ratio {self.ratio:.2f})"
                if self.snapshot_id is not None and self.ratio is not None else
                f"snapshot {self.snapshot_id} (empty)" if self.snapshot_id is not None else "no snapshot")
        return f"{self.app}/{self.store}: {self.since_snapshot} records in {self.changelog} past {base}"


def changelog_growth(spec: PlatformSpec, app_name: str, store: str,
                     client_config: Mapping[str, object]) -> ChangelogGrowth:
    """The growth of the changelog of ``app_name``'s ``store`` past its newest snapshot (see the module doc)."""
    app = spec.apps[app_name]
    changelog = app.changelog_topic(store)
    location = spec.snapshots.resolved_location(repo_root())
    manifest = latest_manifest(location, app.application_id, store)
    config = dict(client_config)
    bootstrap = str(config.pop("bootstrap.servers"))
    count = partition_counts(bootstrap, [changelog], client_config=config).get(changelog)
    if not count:
        return ChangelogGrowth(app_name, store, changelog, 0, manifest.snapshot_id if manifest else None,
                               manifest.keys if manifest else 0)
    bounds = watermarks(bootstrap, [(changelog, p) for p in range(count)], client_config=config)
    covered = manifest.next_offsets if manifest is not None else {}
    since = sum(max(end - max(covered.get(partition, earliest), earliest), 0)
                for (_, partition), (earliest, end) in bounds.items())
    return ChangelogGrowth(app_name, store, changelog, since, manifest.snapshot_id if manifest else None,
                           manifest.keys if manifest else 0)


def growth_sensor(spec: PlatformSpec, compaction_keys: Mapping[tuple[str, str], dg.AssetKey],
                  clock: Callable[[], float] = time.time, minimum_interval_seconds: int | None = None
                  ) -> dg.SensorDefinition:
    """The sensor that requests ``compaction_keys[(app, store)]`` when that store's changelog grew past the
    spec's thresholds (``snapshots.growth``), at most once per ``at_most_every_minutes`` per store; it ticks
    at most every ``minimum_interval_seconds`` (default: the spec's ``check_every_seconds``). ``clock`` gives the
    time (epoch seconds)."""
    growth_spec = spec.snapshots.growth
    every_s = growth_spec.at_most_every_minutes * 60

    @dg.sensor(
        name=GROWTH_SENSOR,
        asset_selection=dg.AssetSelection.assets(*compaction_keys.values()),
        minimum_interval_seconds=minimum_interval_seconds or growth_spec.check_every_seconds,
        default_status=dg.DefaultSensorStatus.STOPPED,
        description=(f"Compacts a store whose changelog grew {growth_spec.records} records, or {growth_spec.ratio}x "
                     f"its snapshot's keys, past its newest snapshot; at most once every "
                     f"{growth_spec.at_most_every_minutes} min per store."),
    )
    def compact_grown_changelogs(context: dg.SensorEvaluationContext, kafka: KafkaResource) -> dg.SensorResult:
        last: dict[str, float] = json.loads(context.cursor) if context.cursor else {}
        now = clock()
        client_config = kafka.client_config()
        requests: list[dg.RunRequest] = []
        quiet: list[str] = []
        for (app, store), key in sorted(compaction_keys.items()):
            growth = changelog_growth(spec, app, store, client_config)
            name = f"{app}/{store}"
            if not growth.due(growth_spec.records, growth_spec.ratio):
                quiet.append(growth.describe())
                continue
            if now - last.get(name, float("-inf")) < every_s:
                quiet.append(f"{growth.describe()}: due, but compaction was requested "
                             f"{(now - last[name]) / 60:.0f} min ago (at most every {growth_spec.at_most_every_minutes} min)")
                continue
            last[name] = now
            context.log.info(f"requesting compaction of {growth.describe()}")
            requests.append(dg.RunRequest(
                run_key=f"growth/{name}/{int(now // every_s)}",
                asset_selection=[key],
                tags={"brook/compaction_trigger": "changelog growth",
                      "brook/growth_records": str(growth.since_snapshot),
                      "brook/growth_snapshot": growth.snapshot_id or "none"},
            ))
        cursor = json.dumps(last, sort_keys=True)
        if requests:
            return dg.SensorResult(run_requests=requests, cursor=cursor)
        reason = ("no changelog grew past its threshold: " + "; ".join(quiet)) if quiet else \
            "no logged store in the platform spec"
        return dg.SensorResult(skip_reason=reason, cursor=cursor)

    return compact_grown_changelogs
