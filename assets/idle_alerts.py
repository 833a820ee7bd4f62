"""Idle-source alerts in Dagster: per app, the sensor ``idle_alerts_<app>`` reads ``<application.id>-alerts`` (what
the runtime's idle watchdog writes: :mod:`streaming.runtime.idle_watchdog`, ``processing.idle.timeout.ms``) from
its cursor, and turns each ``idle`` alert into a run of the job ``idle_alert_<app>``, which fails with the
alert's details (topic, partitions, idle for how long, last offset and timestamp per partition), so the UI shows
a failed run per alert. A ``resumed`` alert requests nothing: the skip reason says which topic resumed after how
long. Runbook: platform/runbooks/idle-source.md.

The cursor (JSON: alerts-topic partition -> next offset to read) makes each alert count once; each run key
also names the alert's offset, so the daemon never launches two runs for one alert even if the cursor is reset.
Starts stopped, like the other sensors: ``dagster sensor start idle_alerts_<app>`` or the switch in the UI.

No ``from __future__ import annotations`` here: Dagster reads the op's ``context`` annotation as a class.
"""

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import dagster as dg
from confluent_kafka import OFFSET_BEGINNING

from assets.platform_spec import PlatformSpec
from assets.resources import KafkaResource
from streaming.admin import partition_counts, read_to_end
from streaming.naming import alerts_topic

__all__ = ["IdleAlert", "idle_alert_definitions", "idle_alert_job", "idle_alerts_sensor", "read_alerts"]

#: Sensor ticks at most this often (seconds).
CHECK_EVERY_SECONDS = 30


@dataclass(frozen=True)
class IdleAlert:
    """One alert record of the watchdog, and where it was read."""

    partition: int
    offset: int
    body: dict[str, Any]

    @property
    def state(self) -> str:
        return str(self.body.get("state"))

    def describe(self) -> str:
        """One line: the app, the topic and partitions, and for how long no record arrived."""
        seen = ", ".join(f"p{p}: offset {s['offset']} at {s['timestamp']}" for p, s in
                         sorted(self.body.get("last_seen", {}).items(), key=lambda item: int(item[0])))
        what = "idle for" if self.state == "idle" else "resumed after"
        return (f"{self.body.get('application_id')}: source topic {self.body.get('topic')} partitions "
                f"{self.body.get('partitions')} {what} {self.body.get('idle_ms', 0) / 1000:.1f} s "
                f"(timeout {self.body.get('timeout_ms', 0) / 1000:.1f} s; last seen {seen or 'nothing'})")


def read_alerts(client_config: Mapping[str, Any], topic: str,
                cursor: Mapping[str, int]) -> tuple[list[IdleAlert], dict[str, int]]:
    """The alerts of ``topic`` after ``cursor`` (partition -> next offset; absent: from the beginning), and the
    cursor past them. A topic that does not exist (the app's watchdog is off) has no alerts."""
    config = dict(client_config)
    count = partition_counts(str(config.pop("bootstrap.servers")), [topic], client_config=config).get(topic)
    if not count:
        return [], dict(cursor)
    starts = [(topic, p, cursor.get(str(p), OFFSET_BEGINNING)) for p in range(count)]
    alerts: list[IdleAlert] = []
    after = dict(cursor)
    for message in read_to_end(client_config, starts):
        alerts.append(IdleAlert(message.partition(), message.offset(), json.loads(message.value())))
        after[str(message.partition())] = message.offset() + 1
    return alerts, after


def idle_alert_job(app: str) -> dg.JobDefinition:
    """The job ``idle_alert_<app>``: one op that fails with the alert in its run config (the sensor's request)."""

    @dg.op(name=f"report_idle_source_{app}", config_schema={"alert": dg.Permissive()})
    def report_idle_source(context: dg.OpExecutionContext) -> None:
        alert = IdleAlert(-1, -1, dict(context.op_config["alert"]))
        raise dg.Failure(
            description=f"idle source: {alert.describe()}. Runbook: platform/runbooks/idle-source.md",
            metadata={"topic": str(alert.body.get("topic")), "partitions": str(alert.body.get("partitions")),
                      "idle_seconds": float(alert.body.get("idle_ms", 0)) / 1000,
                      "last_seen": dg.MetadataValue.json(alert.body.get("last_seen", {}))})

    @dg.job(name=f"idle_alert_{app}", description=f"Fails with an idle-source alert of app {app} (raised by the "
            f"sensor idle_alerts_{app}; runbook platform/runbooks/idle-source.md)", tags={"brook/app": app})
    def job() -> None:
        report_idle_source()

    return job


def idle_alerts_sensor(app: str, application_id: str, job: dg.JobDefinition,
                       minimum_interval_seconds: int = CHECK_EVERY_SECONDS) -> dg.SensorDefinition:
    """The sensor ``idle_alerts_<app>`` over ``<application_id>-alerts`` (see the module doc)."""
    topic = alerts_topic(application_id)

    @dg.sensor(name=f"idle_alerts_{app}", job=job, minimum_interval_seconds=minimum_interval_seconds,
               default_status=dg.DefaultSensorStatus.STOPPED,
               description=f"Fails a run of {job.name} for each idle-source alert in {topic}")
    def sensor(context: dg.SensorEvaluationContext, kafka: KafkaResource) -> dg.SensorResult:
        cursor = json.loads(context.cursor) if context.cursor else {}
        alerts, after = read_alerts(kafka.client_config(), topic, cursor)
        requests = [dg.RunRequest(run_key=f"idle/{a.partition}/{a.offset}", run_config={"ops": {
            f"report_idle_source_{app}": {"config": {"alert": a.body}}}},
            tags={"brook/idle_topic": str(a.body.get("topic")),
                  "brook/idle_seconds": f"{a.body.get('idle_ms', 0) / 1000:.0f}"})
            for a in alerts if a.state == "idle"]
        resumed = [a.describe() for a in alerts if a.state == "resumed"]
        for alert in alerts:
            context.log.info(f"alert at {topic}[{alert.partition}]@{alert.offset}: {alert.describe()}")
        if requests:
            return dg.SensorResult(run_requests=requests, cursor=json.dumps(after, sort_keys=True))
        reason = ("cleared: " + "; ".join(resumed)) if resumed else f"no new alert in {topic}"
        return dg.SensorResult(skip_reason=reason, cursor=json.dumps(after, sort_keys=True))

    return sensor


def idle_alert_definitions(spec: PlatformSpec) -> dg.Definitions:
    """Per app of the platform spec: the job ``idle_alert_<app>`` and the sensor ``idle_alerts_<app>``."""
    jobs = {app: idle_alert_job(app) for app in sorted(spec.apps)}
    return dg.Definitions(jobs=list(jobs.values()), sensors=[
        idle_alerts_sensor(app, spec.apps[app].application_id, jobs[app]) for app in sorted(spec.apps)])
