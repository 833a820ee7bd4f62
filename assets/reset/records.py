"""How a reset is recorded in Dagster: a materialization of ``resets/<app>`` (an executed reset) or an observation
(a dry run), with the plan as metadata. Both the job ``reset_<app>`` and ``brook app reset`` record them."""

from __future__ import annotations

import json

import dagster as dg

from streaming.reset import ResetPlan, ResetResult

__all__ = ["RESETS_GROUP", "reset_asset_key", "reset_asset_spec", "reset_materialization", "reset_observation"]

RESETS_GROUP = "resets"


def reset_asset_key(app: str) -> dg.AssetKey:
    """``resets/<app>``: the resets of app ``app`` of the platform spec."""
    return dg.AssetKey(["resets", app])


def reset_asset_spec(app: str, application_id: str) -> dg.AssetSpec:
    """The asset whose materializations are the app's executed resets (nothing else writes it)."""
    return dg.AssetSpec(key=reset_asset_key(app), group_name=RESETS_GROUP, kinds={"kafka"},
                        description=f"Application resets of {app} (application.id {application_id}): each "
                                    f"materialization is one executed reset, its plan in the metadata. Run the job "
                                    f"reset_{app}; runbook platform/runbooks/reset.md.")


def _plan_metadata(plan: ResetPlan) -> dict[str, dg.MetadataValue]:
    return {
        "plan": dg.MetadataValue.json(json.loads(plan.to_json())),
        "table": dg.MetadataValue.md(f"```\n{plan.table()}\n```"),
        "position": dg.MetadataValue.text(plan.position.describe()),
        "fingerprint": dg.MetadataValue.text(plan.fingerprint),
        "epoch": dg.MetadataValue.text(f"{plan.epoch_before} -> {plan.epoch_after}"),
        "offsets": dg.MetadataValue.int(len(plan.offsets)),
        "topics_recreated": dg.MetadataValue.json([t.topic for t in plan.recreate]),
        "snapshots_retired": dg.MetadataValue.int(len(plan.snapshots)),
    }


def reset_materialization(app: str, plan: ResetPlan, result: ResetResult) -> dg.AssetMaterialization:
    """An executed reset of ``app``."""
    return dg.AssetMaterialization(asset_key=reset_asset_key(app), description=f"reset {plan.position.describe()}",
                                   metadata={**_plan_metadata(plan),
                                             "duration_s": dg.MetadataValue.float(round(result.duration_s, 3))})


def reset_observation(app: str, plan: ResetPlan, plan_path: str) -> dg.AssetObservation:
    """A dry run of a reset of ``app``: the plan, and where it was written (to execute it)."""
    return dg.AssetObservation(asset_key=reset_asset_key(app),
                               description=f"dry run {plan.position.describe()}: nothing changed",
                               metadata={**_plan_metadata(plan), "plan_path": dg.MetadataValue.path(plan_path)})
