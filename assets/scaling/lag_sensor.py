"""The sensor ``plan_scaling_on_lag``: an app whose consumer lag stays over a threshold gets a scaling plan.

Every tick samples each app's lag (:func:`assets.lag.sample_lag`: the group's committed offsets against the exact
ends of its inputs, physical names through the spec's generations). When the lag has been at or over
``scaling.lag_records`` for ``scaling.sustained_minutes`` (every tick since it first was), the sensor sizes the
group from the last two samples (:func:`assets.lag.partitions_needed`: the input rate plus draining the lag within
``scaling.drain_minutes``, with ``scaling.headroom``, over the measured per-partition processing rate) and requests
a **dry run** of ``scale_<app>`` with that count and ``preview: true``: the plan appears in the run's observation of
``scalings/<app>``. It never stops workers nor executes anything: applying the plan is the operator's step
(``platform/runbooks/scale-partitions.md``). One plan per episode: the lag must fall under the threshold before
another is requested. Quiet otherwise, and when nothing was processed between two samples (stopped workers are not
fixed by more partitions); the skip reason says each app's lag.

The cursor (JSON, per app): the last sample, since when the lag is over, and when a plan was requested. Starts
stopped: ``dagster sensor start plan_scaling_on_lag``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import dagster as dg

from assets.lag import LagSample, partitions_needed, sample_lag
from assets.platform_spec import PlatformSpec
from assets.resources import KafkaResource

__all__ = ["LAG_SENSOR", "lag_sensor"]

LAG_SENSOR = "plan_scaling_on_lag"


def lag_sensor(spec: PlatformSpec, jobs: dict[str, dg.JobDefinition], clock: Callable[[], float] = time.time,
               minimum_interval_seconds: int | None = None) -> dg.SensorDefinition:
    """The sensor requesting ``jobs[app]`` (``scale_<app>``) as a dry run for an app whose lag stays high (module
    doc), ticking at most every ``minimum_interval_seconds`` (default: the spec's ``scaling.check_every_seconds``);
    ``clock`` gives the time (epoch seconds)."""
    rules = spec.scaling
    sustained_s = rules.sustained_minutes * 60

    @dg.sensor(
        name=LAG_SENSOR,
        jobs=list(jobs.values()),
        minimum_interval_seconds=minimum_interval_seconds or rules.check_every_seconds,
        default_status=dg.DefaultSensorStatus.STOPPED,
        description=(f"A dry run of scale_<app> when an app's lag stays >= {rules.lag_records} records for "
                     f"{rules.sustained_minutes:g} min, sized from the measured rates; never stops workers."),
    )
    def plan_scaling_on_lag(context: dg.SensorEvaluationContext, kafka: KafkaResource) -> dg.SensorResult:
        cursor: dict[str, dict[str, Any]] = json.loads(context.cursor) if context.cursor else {}
        config = kafka.client_config()
        bootstrap = str(config.pop("bootstrap.servers"))
        now = clock()
        requests: list[dg.RunRequest] = []
        quiet: list[str] = []
        for name, job in sorted(jobs.items()):
            app = spec.apps[name]
            state = cursor.setdefault(name, {})
            inputs = [app.physical_topic(t) for t in app.inputs]
            current = sample_lag(bootstrap, app.application_id, inputs, client_config=config, at=now)
            previous = LagSample.from_json(state["sample"]) if "sample" in state else None
            state["sample"] = current.to_json()
            if current.lag < rules.lag_records:
                state.pop("over_since", None)
                state.pop("planned_at", None)
                quiet.append(f"{name}: lag {current.lag:,}")
                continue
            over_since = state.setdefault("over_since", now)
            if now - over_since < sustained_s:
                quiet.append(f"{name}: lag {current.lag:,} for {(now - over_since) / 60:.0f} of "
                             f"{rules.sustained_minutes:g} min")
                continue
            if "planned_at" in state:
                quiet.append(f"{name}: lag {current.lag:,}, planned already (run key lag/{name}/{int(over_since)})")
                continue
            partitions = sum(key.startswith(f"{inputs[0]}[") for key in current.ends)  # the group's count now
            advice = partitions_needed(previous, current, partitions, headroom=rules.headroom,
                                       drain_minutes=rules.drain_minutes, max_partitions=rules.max_partitions) \
                if previous is not None and previous.at < now else None
            if advice is None or advice.partitions <= partitions:
                quiet.append(f"{name}: lag {current.lag:,} but nothing was processed since the last tick (workers "
                             f"stopped?): no rate to size from" if advice is None else
                             f"{name}: lag {current.lag:,}, but {partitions} partitions are the most it may have")
                continue
            state["planned_at"] = now
            context.log.info(f"{name}: {advice.describe()}: requesting a dry run of {job.name}")
            requests.append(dg.RunRequest(
                run_key=f"lag/{name}/{int(over_since)}", job_name=job.name,
                run_config={"ops": {f"{job.name}_op": {"config": {"partitions": advice.partitions, "dry_run": True,
                                                                   "preview": True}}}},
                tags={"brook/scaling_trigger": "consumer lag", "brook/lag": str(advice.lag),
                      "brook/advice": advice.describe()}))
        text = json.dumps(cursor, sort_keys=True)
        if requests:
            return dg.SensorResult(run_requests=requests, cursor=text)
        return dg.SensorResult(skip_reason="no app lags long enough to plan a scaling: " + "; ".join(quiet),
                               cursor=text)

    return plan_scaling_on_lag
